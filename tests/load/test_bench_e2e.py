"""End to end on real loopback sockets: bench_async against a scripted SSE server, then the saved run directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latscope.load.arrivals import ClosedLoop, InterArrival, OpenLoop
from latscope.load.bench import bench_async, load_summaries, summarize_dir
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.slo import parse_slo
from latscope.load.workload import Workload, parse_class
from latscope.runs.storage import read_run_json
from latscope.wire import Timeouts
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ScriptedServer

pytestmark = pytest.mark.timeout(60)


def config(url: str, **kw: object) -> BenchConfig:
    base: dict[str, object] = {
        "target": Target.resolve(url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
        "steps": (ClosedLoop(4),),
        "workload": Workload.single(LengthDist.fixed(8), LengthDist.fixed(6)),
        "requests": 12,
        # these servers count every request they see (a slow first few, a failure after N); the metrics sampler's
        # GET would be one of them (tests/load/test_server_gauges.py tests it)
        "server_metrics": False,
    }
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


async def test_a_closed_loop_run_saves_tables_pandas_reads_back(tmp_path: Path) -> None:
    async with ScriptedServer(Script(gap_s=0.001)) as server:
        result = await bench_async(config(server.url, warmup_requests=4), tmp_path)
    assert result.model == "scripted"
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    events = pd.read_parquet(tmp_path / "events.parquet")
    assert len(requests) == 16 and requests.ok.all()
    assert sorted(requests.request_id) == list(range(16))
    assert requests.warmup.sum() == 4
    assert (requests.output_tokens == 6).all() and (requests.output_tokens_source == "usage").all()
    assert (requests.itl_count == 5).all()
    assert len(events) == requests.events.sum()
    per_request = events.groupby("request_id").size()
    assert (per_request.sort_index().to_numpy() == requests.sort_values("request_id").events.to_numpy()).all()
    gaps = events.gap_ms.dropna()
    assert len(gaps) == requests.itl_count.sum()
    data = read_run_json(tmp_path)
    assert data["files"]["events_rows"] == len(events)
    assert data["config"]["steps"] == [{"kind": "closed", "concurrency": 4}]


async def test_warm_up_is_excluded_from_the_summary(tmp_path: Path) -> None:
    # The first 5 requests are slow (a cold server); they are warm-up, so none of that shows in the results.
    script = Script(gap_s=0.001, first_token_s=0.0, stall_s=lambda n, k: 0.2 if n < 5 and k == 0 else 0.0)
    async with ScriptedServer(script) as server:
        result = await bench_async(config(server.url, steps=(ClosedLoop(1),), warmup_requests=5, requests=6), tmp_path)
    [step] = result.steps
    assert step.warmup_requests == 5 and step.overall.requests == 6
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    slow = requests[requests.warmup].ttft_ms.min()
    assert step.overall.metrics["ttft_ms"].max < slow / 4  # the slow ones are the excluded ones


async def test_a_stall_in_one_gap_per_request_shows_in_itl_p99(tmp_path: Path) -> None:
    script = Script(tokens=30, gap_s=0.001, stall_s=lambda n, k: 0.1 if k in (10, 20) else 0.0)
    async with ScriptedServer(script) as server:
        result = await bench_async(config(server.url, requests=16), tmp_path)
    itl = result.steps[0].overall.metrics["itl_ms"]
    assert itl.count == 16 * 29
    assert itl.p99 > 10 * itl.p50  # the stalls own the tail …
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    mean_itl = (requests.e2e_ms - requests.ttft_ms) / requests.itl_count
    assert itl.p99 > 3 * np.percentile(mean_itl, 99)  # … which per-request means would have diluted


async def test_client_queue_time_is_counted_when_concurrency_saturates(tmp_path: Path) -> None:
    # 200 arrivals/s, at most 2 in flight, each ~25 ms: the server can take ~80/s, so arrivals queue in the client.
    arrival = OpenLoop(200.0, InterArrival.CONSTANT, max_concurrency=2)
    async with ScriptedServer(Script(tokens=5, gap_s=0.005)) as server:
        result = await bench_async(config(server.url, steps=(arrival,), requests=30), tmp_path)
    [step] = result.steps
    queue = step.overall.metrics["client_queue_ms"]
    e2e = step.overall.metrics["e2e_ms"]
    assert step.overall.requests == 30 and step.overall.ok == 30  # late requests are sent and measured, not dropped
    assert queue.max > 3 * e2e.p50  # waits of several service times, against the same run's service time
    assert queue.p99 > 10 * (step.schedule_lag_ms.p99 if step.schedule_lag_ms else 0.0)  # not dispatch lag
    assert any("max concurrency 2 was reached" in w for w in step.warnings)


async def test_a_target_that_fails_mid_run_gives_errors_by_phase_and_the_run_is_saved(tmp_path: Path) -> None:
    script = Script(
        tokens=6,
        gap_s=0.001,
        status=lambda n: 503 if 8 <= n < 12 else None,
        reset_after=lambda n: 2 if 12 <= n < 16 else None,
        refuse_after=20,
    )
    async with ScriptedServer(script) as server:
        cfg = config(server.url, steps=(ClosedLoop(1),), requests=24, new_connection_per_request=True)
        result = await bench_async(cfg, tmp_path)
    [step] = result.steps
    o = step.overall
    assert o.requests == 24
    assert o.errors_by_status == {"503": 4}
    assert o.errors_by_phase["headers"] == 4
    assert o.errors_by_phase["stream"] == 4
    assert o.errors_by_phase["connect"] == 4  # the listener is gone: connection refused
    assert o.ok == 12
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(requests) == 24
    reset = requests[requests.error_phase == "stream"]
    assert (reset.token_events == 2).all()  # what arrived before the reset is kept
    assert read_run_json(tmp_path)["steps"][0]["summary"]["overall"]["errors"] == 12


async def test_a_sweep_gives_one_summary_per_step_and_classes_their_own(tmp_path: Path) -> None:
    workload = Workload(
        (parse_class("short:weight=3,prompt=8,output=4"), parse_class("long:weight=1,prompt=64,output=12")), seed=1
    )
    async with ScriptedServer(Script(gap_s=0.0005)) as server:
        cfg = config(
            server.url, steps=(ClosedLoop(1), ClosedLoop(4)), workload=workload, requests=20, slo=parse_slo("ttft=1s")
        )
        result = await bench_async(cfg, tmp_path)
    assert [s.label for s in result.steps] == ["concurrency=1", "concurrency=4"]
    for s in result.steps:
        assert s.overall.requests == 20
        assert set(s.classes) == {"short", "long"}
        assert s.classes["long"].metrics["output_tokens"].max == 12
        assert s.overall.goodput_fraction == 1.0
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests.groupby("step").size().tolist() == [20, 20]
    assert load_summaries(read_run_json(tmp_path)) == result.steps


async def test_goodput_can_be_recomputed_from_the_saved_tables(tmp_path: Path) -> None:
    async with ScriptedServer(Script(gap_s=0.001, first_token_s=0.0)) as server:
        await bench_async(config(server.url), tmp_path)
    [strict] = summarize_dir(tmp_path, parse_slo("ttft=1us"))
    [loose] = summarize_dir(tmp_path, parse_slo("ttft=10s"))
    assert strict.overall.goodput_fraction == 0.0 and loose.overall.goodput_fraction == 1.0


async def test_open_loop_poisson_run_reports_dispatch_numbers(tmp_path: Path) -> None:
    async with ScriptedServer(Script(tokens=2, gap_s=0.0)) as server:
        result = await bench_async(config(server.url, steps=(OpenLoop(100.0),), requests=40), tmp_path)
    [step] = result.steps
    assert step.offered_rps == 100.0
    assert step.schedule_rps is not None and step.achieved_rps is not None
    assert step.schedule_lag_ms is not None and step.schedule_lag_ms.count == 40
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests.schedule_lag_ms.notna().all()
    assert (requests.started_at_ms >= requests.scheduled_at_ms).all()


async def test_a_duration_bound_stops_dispatching_and_drains(tmp_path: Path) -> None:
    async with ScriptedServer(Script(tokens=3, gap_s=0.002)) as server:
        result = await bench_async(
            config(server.url, steps=(ClosedLoop(2),), requests=None, duration_s=0.3, warmup_s=0.1), tmp_path
        )
    [step] = result.steps
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    measured = requests[~requests.warmup]
    assert step.overall.requests == len(measured) > 5
    assert requests.warmup.any()
    assert (measured.scheduled_at_ms >= 100.0).all() and (measured.scheduled_at_ms < 400.0).all()
    assert requests.ok.all()  # requests in flight at the end finished (no drain limit)


async def test_busy_poll_keeps_the_loop_turning_and_is_not_reported_as_saturation(tmp_path: Path) -> None:
    async with ScriptedServer(Script(tokens=10, gap_s=0.01)) as server:
        result = await bench_async(config(server.url, busy_poll=True), tmp_path)
    [step] = result.steps
    assert step.overall.ok == 12
    assert step.client is not None and step.client.spin_share_mean is not None
    assert step.client.spin_share_mean > 0.5
    assert step.client.saturated_workers == 0
    assert step.client.off_cpu_share is not None  # the poll watched for the machine taking the CPU away


async def test_what_the_server_reports_lands_in_the_requests_table(tmp_path: Path) -> None:
    from latscope.lab.app import Lab
    from latscope.lab.costmodel import CostModel

    cost = CostModel.default().with_overrides(prefill_per_token_ms=0.05, decode_base_ms=1.0)
    async with Lab(cost=cost) as lab:
        await bench_async(config(lab.url, requests=6, steps=(ClosedLoop(2),)), tmp_path)
        truth = {r.request_id: r for r in lab.records if r.request_id is not None}
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests.ok.all()
    # the lab's Server-Timing (header) and its final chunk's object: what it injected, request by request
    assert requests.server_queue_ms.notna().all() and requests.server_prefill_ms.notna().all()
    assert requests.server_decode_ms.notna().all() and requests.server_e2e_ms.isna().all()
    recorded = sorted(r.prefill_ms or 0.0 for r in truth.values())
    assert np.allclose(sorted(requests.server_prefill_ms), recorded, atol=0.01)
