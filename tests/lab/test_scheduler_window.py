"""The dynamic batching window holds admissions until enough requests wait or the window expires."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from latscope.lab.batchlog import BatchLog
from latscope.lab.costmodel import CostModel
from latscope.lab.engine import EngineCore, Policy, simulate
from latscope.lab.scheduler import GenerationRequest, RequestStream, Scheduler, SchedulerConfig, TokenOut

NS_PER_MS = 1_000_000

COST = CostModel(
    prefill_base_ms=1.0,
    prefill_per_token_ms=0.01,
    prefill_quadratic_ms=0.0,
    decode_base_ms=2.0,
    decode_per_seq_ms=0.01,
    kv_blocks=4096,
    max_batch=64,
    chunk_tokens=512,
)


@asynccontextmanager
async def running(config: SchedulerConfig, log: BatchLog) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(config, batch_log=log)
    await scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()


async def collect(stream: RequestStream) -> list[TokenOut]:
    return [token async for token in stream]


async def test_the_window_closes_as_soon_as_the_trigger_count_waits() -> None:
    log = BatchLog()
    config = SchedulerConfig(cost=COST, batch_window_ms=2000.0, batch_trigger=3)
    async with running(config, log) as scheduler:
        streams = [scheduler.submit(GenerationRequest(f"r{i}", 50, 3)) for i in range(3)]
        await asyncio.gather(*(collect(s) for s in streams))
    closes = log.of_stage("window_close")
    assert len(closes) == 1
    close = closes[0]
    assert (close["pending_requests"], close["actual_batch_size"], close["trigger_threshold"]) == (3, 3, 3)
    assert close["latency_us"] < 2000.0 * 1000 / 10  # far from the 2 s expiry
    ttfts = [s.stats.ttft_ms for s in streams]
    assert all(t is not None and t < 200.0 for t in ttfts)
    first_step = log.of_stage("prefill")[0]
    assert first_step["actual_batch_size"] == 3  # released together, prefilled together


async def test_an_idle_request_waits_out_the_whole_window() -> None:
    window_ms = 60.0
    ttft: dict[float, float] = {}
    for window in (0.0, window_ms):
        log = BatchLog()
        config = SchedulerConfig(cost=COST, batch_window_ms=window, batch_trigger=8)
        async with running(config, log) as scheduler:
            stream = scheduler.submit(GenerationRequest("alone", 50, 2))
            await collect(stream)
        assert stream.stats.ttft_ms is not None
        ttft[window] = stream.stats.ttft_ms
        if window:
            (close,) = log.of_stage("window_close")
            assert close["pending_requests"] == 1
            assert close["actual_batch_size"] == 1
            assert close["latency_us"] >= window_ms * 1000
            assert stream.stats.window_wait_ns >= window_ms * NS_PER_MS
            assert close["latency_us"] < (window_ms + 200) * 1000
    # The window is a floor under TTFT, whatever the prompt: the control run shows what the prefill costs.
    assert ttft[window_ms] >= window_ms
    assert ttft[window_ms] - ttft[0.0] >= 0.8 * window_ms


async def test_running_sequences_keep_decoding_while_the_window_holds_new_ones() -> None:
    log = BatchLog()
    config = SchedulerConfig(cost=COST, batch_window_ms=100.0, batch_trigger=50)
    async with running(config, log) as scheduler:
        first = scheduler.submit(GenerationRequest("first", 20, 200))
        first_task = asyncio.create_task(collect(first))
        await asyncio.sleep(0.15)  # the first window expired, the first request decodes
        held = scheduler.submit(GenerationRequest("held", 20, 2))
        await asyncio.sleep(0.03)
        assert scheduler.waiting == 1 and scheduler.running == 1
        assert first.stats.completion_tokens > 1
        await collect(held)
        first.cancel()
        await first_task
    assert [c["window_id"] for c in log.of_stage("window_close")] == [1, 2]


def test_requests_arriving_after_a_close_open_a_new_window() -> None:
    window_ns = 100 * NS_PER_MS
    arrivals = [
        (0, GenerationRequest("a", 10, 1)),
        (10 * NS_PER_MS, GenerationRequest("b", 10, 1)),
        (500 * NS_PER_MS, GenerationRequest("c", 10, 1)),
    ]
    core = EngineCore(Policy.PRIORITY, COST, batch_window_ns=window_ns, batch_trigger=5, record_events=True)
    a, b, c = simulate(core, arrivals)
    assert core.window_id == 2
    assert a.scheduled_ns == b.scheduled_ns == window_ns  # both released when the first window expired
    assert c.scheduled_ns == 500 * NS_PER_MS + window_ns
    assert (a.window_wait_ns, b.window_wait_ns) == (window_ns, window_ns - 10 * NS_PER_MS)
