"""The part writer converts on the event loop a slice at a time, never in a second thread.

A Python thread that converts holds the GIL; the loop's thread, woken by a read or a dispatch timer, then waits up to
the interpreter's switch interval (5 ms) before it may stamp or send anything. These tests pin the mechanism: every
conversion step runs on the loop's own thread, the loop runs other callbacks between steps, and what is written is
what an inline conversion writes.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import latscope.runs.storage as storage
from latscope.runs.records import RequestContext, Steps, build_steps, build_tables
from latscope.runs.storage import PartWriter
from tests.support.load_timelines import MS, make_timeline

START = 5_000 * MS


def ctx(request_id: int) -> RequestContext:
    return RequestContext(step=0, request_id=request_id, worker=0, class_name="chat", warmup=False, step_start_ns=START)


def batch(n: int, first_id: int = 0) -> list[tuple[object, RequestContext]]:
    return [
        (make_timeline(start_ns=START + i * MS, gaps_ms=[1.0 + i % 3] * 5, coalesced=[i % 4]), ctx(first_id + i))
        for i in range(n)
    ]


@pytest.fixture
def one_step_slices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Slices of one step each (a slice of 0 ns ends after its first step), and the thread of every step."""
    monkeypatch.setattr(storage, "CONVERT_SLICE_NS", 0)
    threads: list[int] = []

    def recording(rows: list[tuple[object, RequestContext]]) -> Steps:
        steps = build_steps(rows)  # type: ignore[arg-type]
        while True:
            threads.append(threading.get_ident())
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            yield

    monkeypatch.setattr(storage, "build_steps", recording)
    return threads


async def test_a_batch_is_converted_on_the_loops_thread_between_other_callbacks(
    tmp_path: Path, one_step_slices: list[int]
) -> None:
    emitted: list[tuple[pa.Table, pa.Table]] = []
    writer = PartWriter(tmp_path, 0, 0, request_batch_rows=20, sink=lambda r, e: emitted.append((r, e)))
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        if not emitted and ticks < 10_000:
            asyncio.get_running_loop().call_soon(tick)

    for t, c in batch(20):
        writer.add(t, c)  # type: ignore[arg-type]
    asyncio.get_running_loop().call_soon(tick)
    assert not emitted  # the full batch was queued, not converted inline
    for _ in range(10_000):
        if emitted:
            break
        await asyncio.sleep(0)
    writer.close()

    assert set(one_step_slices) == {threading.get_ident()}
    # the loop ran a turn of other callbacks between the conversion's steps: one per step, at least one per request
    assert ticks >= 20
    [(requests, _events)] = emitted
    assert requests.column("request_id").to_pylist() == list(range(20))


async def test_what_the_loop_converts_is_what_an_inline_conversion_writes(tmp_path: Path) -> None:
    rows = batch(30)
    on_loop = PartWriter(tmp_path / "loop", 0, 0, request_batch_rows=7, group_requests=7)
    for t, c in rows:
        on_loop.add(t, c)  # type: ignore[arg-type]
    for _ in range(50):  # let the converter run part of the way; close() finishes the rest inline
        await asyncio.sleep(0)
    on_loop.close()

    expected_requests, expected_events = build_tables(batch(30))  # type: ignore[arg-type]
    requests = pq.read_table(on_loop.requests_path)
    events = pq.read_table(on_loop.events_path)
    assert requests.equals(expected_requests.cast(requests.schema))
    assert events.equals(expected_events.cast(events.schema))
    # five batches of 7 and the last 2, each a row group of its own (a group of 7 is full), in the order they were
    # added
    assert pq.ParquetFile(on_loop.requests_path).metadata.num_row_groups == 5


async def test_close_finishes_a_conversion_part_way_and_the_queued_batches_in_order(
    tmp_path: Path, one_step_slices: list[int]
) -> None:
    emitted: list[pa.Table] = []
    writer = PartWriter(tmp_path, 0, 0, request_batch_rows=5, sink=lambda r, e: emitted.append(r))
    for t, c in batch(23):
        writer.add(t, c)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # two steps of the first batch
    assert not emitted
    writer.close()
    assert [r.column("request_id").to_pylist() for r in emitted] == [
        list(range(0, 5)),
        list(range(5, 10)),
        list(range(10, 15)),
        list(range(15, 20)),
        [20, 21, 22],
    ]
    await asyncio.sleep(0)  # the cancelled converter wakes and ends without touching anything
    assert len(emitted) == 5


def test_outside_an_event_loop_the_batch_is_converted_inline(tmp_path: Path) -> None:
    emitted: list[pa.Table] = []
    writer = PartWriter(tmp_path, 0, 0, request_batch_rows=4, sink=lambda r, e: emitted.append(r))
    for t, c in batch(4):
        writer.add(t, c)  # type: ignore[arg-type]
    assert len(emitted) == 1  # no loop to hand slices back to: converted when the batch filled
    writer.close()


async def test_a_batch_that_fails_on_the_loop_is_raised_by_the_next_add_and_by_close(tmp_path: Path) -> None:
    def failing_sink(requests: pa.Table, events: pa.Table) -> None:
        raise OSError("disk full")

    writer = PartWriter(tmp_path, 0, 0, request_batch_rows=3, sink=failing_sink)
    rows = batch(4)
    for t, c in rows[:3]:
        writer.add(t, c)  # type: ignore[arg-type]
    for _ in range(1_000):
        if not writer.converting:
            break
        await asyncio.sleep(0)
    with pytest.raises(OSError, match="disk full"):
        writer.add(*rows[3])  # type: ignore[arg-type]
    with pytest.raises(OSError, match="disk full"):
        writer.close()
