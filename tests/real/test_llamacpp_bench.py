"""`bench` against a real llama.cpp server: a short closed-loop load, saved and summarised."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from latscope.load import BenchConfig, ClosedLoop, Workload, bench_async, parse_length
from latscope.wire.target import Target
from tests.real.conftest import LlamaServer


async def test_short_bench_against_llama_cpp_saves_complete_results(llama_server: LlamaServer, tmp_path: Path) -> None:
    config = BenchConfig(
        target=Target.resolve(llama_server.base_url),
        steps=(ClosedLoop(2),),
        workload=Workload.single(parse_length("32"), parse_length("16")),
        requests=8,
        warmup_requests=1,
        workers=1,
    )
    result = await bench_async(config, tmp_path / "run")
    step = result.steps[0]
    assert step.overall.requests == 8
    assert step.overall.errors == 0, llama_server.log_tail()
    assert step.overall.metrics["ttft_ms"].p50 > 0
    # one SSE event per token: every gap is a real gap, and there are (tokens - 1) of them per request
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    measured = requests[~requests["warmup"]]
    assert len(measured) == 8
    assert (measured["output_tokens"] > 1).all()
    events = pd.read_parquet(tmp_path / "run" / "events.parquet")
    assert len(events) >= int(measured["output_tokens"].sum())
