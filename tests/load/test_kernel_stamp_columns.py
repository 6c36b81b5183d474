"""Kernel stamps in the run's tables: the stamp source and the client's measured scheduling delay per request and
per event, and the --stamps setting in run.json's config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from latscope.load.arrivals import ClosedLoop
from latscope.load.bench import bench_async
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.stamps import describe, stamps_summary
from latscope.load.workload import Workload
from latscope.runs import records
from latscope.runs.records import RequestContext, build_tables
from latscope.runs.storage import read_run_json
from latscope.timeline.model import Read
from latscope.wire import Timeouts
from latscope.wire.kstamps import kernel_stamps_supported
from latscope.wire.target import Target, TargetError
from tests.support.load_sse_server import Script, ScriptedServer
from tests.support.load_timelines import MS, make_timeline

START = 5_000 * MS


def ctx(request_id: int) -> RequestContext:
    return RequestContext(step=0, request_id=request_id, worker=0, class_name="chat", warmup=False, step_start_ns=START)


def test_kernel_stamped_reads_give_the_request_its_read_delay_and_each_event_its_read_s_delay() -> None:
    t = make_timeline()
    assert t.connection is not None
    t.connection.stamps = "kernel"
    t.reads = [Read(r.at_ns, r.nbytes, r.at_ns + (i + 1) * MS // 10) for i, r in enumerate(t.reads)]
    plain = make_timeline()
    requests, events = build_tables([(t, ctx(0)), (plain, ctx(1))])
    rows = requests.to_pylist()
    assert [r["stamps"] for r in rows] == ["kernel", "user"]
    delays = [(i + 1) / 10 for i in range(len(t.reads))]
    assert rows[0]["read_delay_p50_ms"] == pytest.approx(sorted(delays)[len(delays) // 2], abs=0.06)
    assert rows[0]["read_delay_p99_ms"] == pytest.approx(max(delays), abs=0.02)
    assert rows[1]["read_delay_p50_ms"] is None and rows[1]["read_delay_p99_ms"] is None
    ev = events.to_pylist()
    for row in ev:
        if row["request_id"] == 0:
            assert row["read_delay_ms"] == pytest.approx((row["read_index"] + 1) / 10)
        else:
            assert row["read_delay_ms"] is None


@pytest.mark.parametrize("chunk", [4, records.READ_DELAY_CHUNK])
def test_a_kernel_stamped_request_s_unstamped_read_has_no_delay_and_stays_out_of_its_percentiles(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # three requests in one batch, the middle one user-stamped: each request's reads are its own, however many
    # steps gather them
    monkeypatch.setattr(records, "READ_DELAY_CHUNK", chunk)
    timelines = []
    for step in (1, 0, 3):
        t = make_timeline()
        assert t.connection is not None
        if step:
            t.connection.stamps = "kernel"
            t.reads = [Read(r.at_ns, r.nbytes, r.at_ns + step * (i + 1) * MS // 10) for i, r in enumerate(t.reads)]
        timelines.append(t)
    first = timelines[0]
    first.reads[0] = Read(first.reads[0].at_ns, first.reads[0].nbytes, None)  # the kernel gave this read no stamp
    requests, events = build_tables([(t, ctx(i)) for i, t in enumerate(timelines)])
    rows = requests.to_pylist()
    stamped = [(i + 1) / 10 for i in range(1, len(first.reads))]
    assert rows[0]["read_delay_p99_ms"] == pytest.approx(float(np.percentile(stamped, 99)))
    assert rows[0]["read_delay_p50_ms"] == pytest.approx(float(np.percentile(stamped, 50)))
    assert rows[1]["read_delay_p50_ms"] is None
    third = [3 * (i + 1) / 10 for i in range(len(timelines[2].reads))]
    assert rows[2]["read_delay_p50_ms"] == pytest.approx(float(np.percentile(third, 50)))
    for row in events.to_pylist():
        scale = (1, None, 3)[row["request_id"]]
        if scale is None or (row["request_id"] == 0 and row["read_index"] == 0):
            assert row["read_delay_ms"] is None
        else:
            assert row["read_delay_ms"] == pytest.approx(scale * (row["read_index"] + 1) / 10)


def test_the_stamp_source_is_part_of_the_bench_config() -> None:
    workload = Workload.single(LengthDist.fixed(4), LengthDist.fixed(4))
    target = Target.resolve("http://127.0.0.1:1/v1", stamps="kernel")
    config = BenchConfig(target=target, steps=(ClosedLoop(1),), workload=workload)
    data = config.to_dict()
    assert data["target"]["stamps"] == "kernel"
    assert BenchConfig.from_dict(data).target.stamps == "kernel"
    del data["target"]  # a run saved before kernel stamps (and before the target was one object)
    assert BenchConfig.from_dict(data).target.stamps == "user"
    with pytest.raises(TargetError, match="--stamps"):
        Target.resolve("http://127.0.0.1:1/v1", stamps="tsc")


@pytest.mark.timeout(60)
@pytest.mark.skipif(not kernel_stamps_supported(), reason="kernel receive stamps need 64-bit Linux")
async def test_a_kernel_stamped_bench_run_says_so_in_run_json_and_its_tables(tmp_path: Path) -> None:
    workload = Workload.single(LengthDist.fixed(8), LengthDist.fixed(6))
    async with ScriptedServer(Script(gap_s=0.001)) as server:
        config = BenchConfig(
            target=Target.resolve(server.url, timeouts=Timeouts(headers_s=10.0, read_s=10.0), stamps="kernel"),
            steps=(ClosedLoop(2),),
            workload=workload,
            requests=6,
            server_metrics=False,
        )
        await bench_async(config, tmp_path)
    data = read_run_json(tmp_path)
    section = data["stamps"]
    assert section["requested"] == "kernel"
    assert section["requests_by_source"] == {"kernel": 6}
    assert section["fell_back"] is False
    assert section["read_delay_ms"]["events"] > 0 and section["read_delay_ms"]["p50"] >= 0
    assert section["clock"] and section["clock"][0]["measurements"] >= 1
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert (requests.stamps == "kernel").all()
    assert (requests.read_delay_p99_ms >= 0).all()
    events = pd.read_parquet(tmp_path / "events.parquet")
    assert events.read_delay_ms.notna().all() and (events.read_delay_ms >= 0).all()
    assert "kernel stamps on 6/6 requests" in describe(section)


def test_a_run_that_asked_for_kernel_stamps_and_fell_back_says_so() -> None:
    requests = pa.table({"stamps": ["kernel", "user", "user"]})
    events = pa.table({"read_delay_ms": pa.array([0.1, None, None], pa.float64())})
    section = stamps_summary("kernel", requests, events.to_batches(), [])
    assert section["fell_back"] is True
    assert section["requests_by_source"] == {"kernel": 1, "user": 2}
    assert section["read_delay_ms"]["events"] == 1
    assert "fell back" in describe(section)
