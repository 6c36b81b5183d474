"""The scheduler streams every token in order, on the cost model's schedule, and survives broken requests.

Timing assertions compare against the cost model's own numbers (the virtual clock is exact) or use generous ratios;
wall-clock checks only bound the loop from below (it never runs faster than the model) and loosely from above.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from latscope.lab import engine
from latscope.lab.batchlog import BatchLog
from latscope.lab.costmodel import CostModel
from latscope.lab.metrics import LabMetrics
from latscope.lab.scheduler import (
    EARLY_WAKE_TOLERANCE_NS,
    GenerationError,
    GenerationRequest,
    Policy,
    RequestStream,
    RequestTooLarge,
    Scheduler,
    SchedulerConfig,
    TokenOut,
)
from latscope.lab.textgen import token_text

NS_PER_MS = 1_000_000

# Small, fast costs: a decode step of 4 ms, prefill at 100 tokens per ms.
FAST = CostModel(
    prefill_base_ms=1.0,
    prefill_per_token_ms=0.01,
    prefill_quadratic_ms=0.0,
    decode_base_ms=4.0,
    decode_per_seq_ms=0.05,
    kv_blocks=4096,
    max_batch=64,
    chunk_tokens=256,
)


@asynccontextmanager
async def running(config: SchedulerConfig, **kwargs: Any) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(config, **kwargs)
    await scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()


async def collect(stream: RequestStream) -> list[TokenOut]:
    return [token async for token in stream]


async def test_streams_every_token_in_order_and_marks_the_last() -> None:
    async with running(SchedulerConfig(cost=FAST)) as scheduler:
        tokens = await collect(scheduler.submit(GenerationRequest("r1", prompt_tokens=50, max_tokens=12, seed=5)))
    assert [t.index for t in tokens] == list(range(12))
    assert [t.finish_reason for t in tokens] == [None] * 11 + ["length"]
    assert [t.text for t in tokens] == [token_text(5, i) for i in range(12)]


async def test_the_same_id_without_a_seed_streams_the_same_text() -> None:
    config = SchedulerConfig(cost=CostModel.zero(), seed=3)
    async with running(config) as first, running(config) as second:
        a = await collect(first.submit(GenerationRequest("same", 10, 20)))
        b = await collect(second.submit(GenerationRequest("same", 10, 20)))
    assert [t.text for t in a] == [t.text for t in b]


async def test_stats_follow_the_request_through_its_phases() -> None:
    async with running(SchedulerConfig(cost=FAST)) as scheduler:
        before = time.monotonic_ns()
        stream = scheduler.submit(GenerationRequest("r1", 300, 5, arrived_ns=before - 2 * NS_PER_MS))
        await collect(stream)
    s = stream.stats
    assert s.arrived_ns < s.queued_ns
    assert s.scheduled_ns is not None and s.first_token_ns is not None and s.finished_ns is not None
    assert s.queued_ns <= s.scheduled_ns <= s.first_token_ns <= s.finished_ns
    assert s.completion_tokens == 5
    assert not s.cancelled and s.error is None and s.preemptions == 0
    assert s.ttft_ms is not None and s.queue_ms is not None and s.prefill_ms is not None
    assert s.ttft_ms >= s.queue_ms + s.prefill_ms + 2.0 - 1e-6  # the 2 ms before the scheduler saw it


async def test_token_times_follow_the_cost_model_exactly() -> None:
    # One request alone whose prompt fits one chunk: its first token comes one prefill step after admission,
    # then one per decode step.
    async with running(SchedulerConfig(cost=FAST)) as scheduler:
        started = time.monotonic_ns()
        stream = scheduler.submit(GenerationRequest("r1", 200, 30))
        tokens = await collect(stream)
        elapsed_ms = (time.monotonic_ns() - started) / NS_PER_MS
    s = stream.stats
    assert s.scheduled_ns is not None
    assert tokens[0].ready_ns - s.scheduled_ns == round(FAST.prefill_ms(200) * NS_PER_MS)
    gaps = [b.ready_ns - a.ready_ns for a, b in itertools.pairwise(tokens)]
    step_ns = round(FAST.decode_step_ms(1) * NS_PER_MS)
    assert statistics.median(gaps) == step_ns
    assert min(gaps) >= step_ns
    modelled_ms = FAST.prefill_ms(200) + 29 * FAST.decode_step_ms(1)
    assert elapsed_ms >= modelled_ms * 0.95
    assert elapsed_ms <= modelled_ms * 2 + 50


async def test_tokens_are_not_delivered_before_they_are_ready() -> None:
    async with running(SchedulerConfig(cost=FAST)) as scheduler:
        early = 0
        async for token in scheduler.submit(GenerationRequest("r1", 100, 20)):
            if time.monotonic_ns() + EARLY_WAKE_TOLERANCE_NS < token.ready_ns:
                early += 1
    assert early == 0


async def test_submitting_before_start_is_served_once_started() -> None:
    scheduler = Scheduler(SchedulerConfig(cost=FAST))
    stream = scheduler.submit(GenerationRequest("early", 10, 3))
    assert scheduler.waiting == 1
    await scheduler.start()
    try:
        assert len(await collect(stream)) == 3
    finally:
        await scheduler.stop()


@pytest.mark.parametrize(("prompt", "max_tokens"), [(0, 5), (5, 0), (-1, 5)])
async def test_submit_rejects_empty_requests(prompt: int, max_tokens: int) -> None:
    async with running(SchedulerConfig(cost=FAST)) as scheduler:
        with pytest.raises(ValueError):
            scheduler.submit(GenerationRequest("bad", prompt, max_tokens))


async def test_submit_rejects_a_request_larger_than_the_whole_kv_cache() -> None:
    tiny = FAST.with_overrides(kv_blocks=10)  # 160 tokens
    async with running(SchedulerConfig(cost=tiny)) as scheduler:
        with pytest.raises(RequestTooLarge, match="KV blocks"):
            scheduler.submit(GenerationRequest("big", 150, 20))
        assert len(await collect(scheduler.submit(GenerationRequest("fits", 140, 20)))) == 20


async def test_stop_ends_live_streams_with_an_error_and_zeroes_the_state() -> None:
    metrics = LabMetrics()
    scheduler = Scheduler(SchedulerConfig(cost=FAST), metrics=metrics)
    await scheduler.start()
    streams = [scheduler.submit(GenerationRequest(f"r{i}", 100, 1000)) for i in range(3)]
    await asyncio.sleep(0.02)
    await scheduler.stop()
    for stream in streams:
        with pytest.raises(GenerationError, match="stopped"):
            await collect(stream)
        assert stream.stats.cancelled
    assert (scheduler.running, scheduler.waiting, scheduler.kv_usage) == (0, 0, 0.0)
    assert metrics.registry.get_sample_value("latscope_lab_requests_running") == 0
    assert metrics.registry.get_sample_value("latscope_lab_kv_cache_usage_ratio") == 0
    with pytest.raises(RuntimeError):
        scheduler.submit(GenerationRequest("late", 1, 1))
    await scheduler.stop()  # idempotent


async def test_a_failing_request_is_failed_alone_and_the_loop_keeps_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real: Callable[[int, int], str] = token_text

    def broken_for_seed_666(seed: int, index: int) -> str:
        if seed == 666 and index == 3:
            raise RuntimeError("boom")
        return real(seed, index)

    monkeypatch.setattr(engine, "token_text", broken_for_seed_666)
    metrics = LabMetrics()
    async with running(SchedulerConfig(cost=FAST), metrics=metrics) as scheduler:
        bad = scheduler.submit(GenerationRequest("bad", 10, 10, seed=666))
        good = [scheduler.submit(GenerationRequest(f"ok{i}", 10, 10, seed=i)) for i in range(3)]
        with pytest.raises(GenerationError, match="boom"):
            await collect(bad)
        assert [len(await collect(s)) for s in good] == [10, 10, 10]
        assert bad.stats.error is not None
        after = await collect(scheduler.submit(GenerationRequest("after", 10, 4, seed=1)))
        assert len(after) == 4
        assert (scheduler.running, scheduler.waiting, scheduler.kv_usage) == (0, 0, 0.0)
    assert metrics.registry.get_sample_value("latscope_lab_requests_total", {"finished_reason": "error"}) == 1


async def test_a_failure_while_planning_fails_live_requests_but_not_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    async with running(SchedulerConfig(cost=FAST, policy=Policy.FIFO)) as scheduler:
        calls = {"n": 0}
        real_plan = scheduler._core.plan

        def plan_failing_once(now_ns: int) -> engine.Step | None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("planner bug")
            return real_plan(now_ns)

        monkeypatch.setattr(scheduler._core, "plan", plan_failing_once)
        first = scheduler.submit(GenerationRequest("first", 10, 5))
        with pytest.raises(GenerationError):
            await collect(first)
        assert len(await collect(scheduler.submit(GenerationRequest("second", 10, 5)))) == 5


async def test_the_batch_log_is_written_as_json_lines_when_the_scheduler_stops(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "batches.jsonl"
    log = BatchLog(path, keep_last=5, flush_every=1000)
    async with running(SchedulerConfig(cost=FAST), batch_log=log) as scheduler:
        await asyncio.gather(*(collect(scheduler.submit(GenerationRequest(f"r{i}", 30, 10))) for i in range(3)))
        assert log.written == 0  # still buffered
        steps = sum(scheduler.injected_cost()["steps"].values())
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(lines) == steps == log.written
    assert set(lines[0]) == {
        "ts_ns",
        "stage",
        "window_id",
        "pending_requests",
        "actual_batch_size",
        "trigger_threshold",
        "latency_us",
    }
    assert lines[0]["stage"] == "prefill" and lines[0]["actual_batch_size"] == 3
    assert {line["stage"] for line in lines[1:]} == {"decode"}
    assert lines[1]["latency_us"] == FAST.decode_step_ms(3) * 1000
    assert [r["ts_ns"] for r in log.records] == [line["ts_ns"] for line in lines[-5:]]  # memory keeps the last 5


async def test_zero_cost_streams_many_tokens_per_second() -> None:
    # Sanity only (measured ~250k/s here): the in-process path must stay far above the lab's end-to-end target of
    # 50k tokens/s, which also pays for HTTP framing and sockets.
    async with running(SchedulerConfig(cost=CostModel.zero())) as scheduler:
        started = time.perf_counter()
        streams = [scheduler.submit(GenerationRequest(f"z{i}", 16, 5000)) for i in range(8)]
        counts = await asyncio.gather(*(_count(s) for s in streams))
        elapsed = time.perf_counter() - started
    assert counts == [5000] * 8
    assert sum(counts) / elapsed > 20_000


async def test_zero_cost_tokens_carry_real_time() -> None:
    async with running(SchedulerConfig(cost=CostModel.zero())) as scheduler:
        before = time.monotonic_ns()
        tokens = await collect(scheduler.submit(GenerationRequest("z", 16, 200)))
        after = time.monotonic_ns()
    assert all(before <= t.ready_ns <= after for t in tokens)


async def _count(stream: RequestStream) -> int:
    n = 0
    async for _ in stream:
        n += 1
    return n
