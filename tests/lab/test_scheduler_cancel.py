"""cancel() works in every state: the request leaves, its KV blocks are freed, the gauges return to zero."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from latscope.lab.costmodel import CostModel
from latscope.lab.metrics import LabMetrics
from latscope.lab.scheduler import (
    GenerationRequest,
    Policy,
    RequestStream,
    Scheduler,
    SchedulerConfig,
    TokenOut,
)

COST = CostModel(
    prefill_base_ms=1.0,
    prefill_per_token_ms=0.05,  # a 2000-token prompt: 101 ms unchunked
    prefill_quadratic_ms=0.0,
    decode_base_ms=3.0,
    decode_per_seq_ms=0.01,
    kv_blocks=4096,
    max_batch=64,
    chunk_tokens=256,
)


@asynccontextmanager
async def running(config: SchedulerConfig) -> AsyncIterator[tuple[Scheduler, LabMetrics]]:
    metrics = LabMetrics()
    scheduler = Scheduler(config, metrics=metrics)
    await scheduler.start()
    try:
        yield scheduler, metrics
    finally:
        await scheduler.stop()


async def collect(stream: RequestStream) -> list[TokenOut]:
    return [token async for token in stream]


def assert_empty(scheduler: Scheduler, metrics: LabMetrics) -> None:
    assert (scheduler.running, scheduler.waiting, scheduler.kv_usage) == (0, 0, 0.0)
    sample = metrics.registry.get_sample_value
    assert sample("latscope_lab_requests_running") == 0
    assert sample("latscope_lab_requests_waiting") == 0
    assert sample("latscope_lab_kv_cache_usage_ratio") == 0


async def test_cancel_while_waiting_in_the_queue() -> None:
    async with running(SchedulerConfig(policy=Policy.FIFO, cost=COST)) as (scheduler, metrics):
        head = scheduler.submit(GenerationRequest("head", 2000, 2))
        await asyncio.sleep(0.01)  # head is prefilling (one 101 ms step)
        queued = scheduler.submit(GenerationRequest("queued", 2000, 2))
        assert scheduler.waiting == 1
        queued.cancel()
        assert scheduler.waiting == 0
        assert await collect(queued) == []
        assert queued.stats.cancelled and queued.stats.scheduled_ns is None
        await collect(head)
        assert_empty(scheduler, metrics)
        assert metrics.registry.get_sample_value("latscope_lab_requests_total", {"finished_reason": "abort"}) == 1


@pytest.mark.parametrize("policy", list(Policy))
async def test_cancel_mid_prefill_frees_its_blocks_at_once(policy: Policy) -> None:
    async with running(SchedulerConfig(policy=policy, cost=COST)) as (scheduler, metrics):
        stream = scheduler.submit(GenerationRequest("long", 2000, 5))
        await asyncio.sleep(0.03)
        assert scheduler.running == 1 and scheduler.kv_usage > 0
        stream.cancel()
        assert_empty(scheduler, metrics)
        assert await collect(stream) == []
        # The engine carries on with new work.
        assert len(await collect(scheduler.submit(GenerationRequest("next", 10, 3)))) == 3
        assert_empty(scheduler, metrics)


async def test_cancel_mid_decode_ends_the_stream_after_what_was_delivered() -> None:
    async with running(SchedulerConfig(cost=COST)) as (scheduler, metrics):
        stream = scheduler.submit(GenerationRequest("chat", 10, 10_000))
        received = []
        async for token in stream:
            received.append(token)
            if len(received) == 5:
                stream.cancel()
        assert 5 <= len(received) < 10_000
        assert stream.stats.cancelled
        assert_empty(scheduler, metrics)


async def test_cancel_while_held_by_the_batching_window() -> None:
    config = SchedulerConfig(cost=COST, batch_window_ms=5000.0, batch_trigger=10)
    async with running(config) as (scheduler, metrics):
        held = scheduler.submit(GenerationRequest("held", 10, 2))
        await asyncio.sleep(0.01)
        assert scheduler.waiting == 1
        held.cancel()
        assert_empty(scheduler, metrics)
        assert held.stats.cancelled and held.stats.scheduled_ns is None


async def test_cancel_is_idempotent_and_a_no_op_once_finished() -> None:
    async with running(SchedulerConfig(cost=COST)) as (scheduler, metrics):
        done = scheduler.submit(GenerationRequest("done", 10, 2))
        assert len(await collect(done)) == 2
        done.cancel()
        assert not done.stats.cancelled
        live = scheduler.submit(GenerationRequest("live", 10, 1000))
        live.cancel()
        live.cancel()
        assert live.stats.cancelled
        assert_empty(scheduler, metrics)
        assert metrics.registry.get_sample_value("latscope_lab_requests_total", {"finished_reason": "abort"}) == 1


async def test_cancelling_many_requests_in_every_state_leaves_nothing_behind() -> None:
    async with running(SchedulerConfig(policy=Policy.PRIORITY, cost=COST.with_overrides(kv_blocks=300))) as (
        scheduler,
        metrics,
    ):
        streams = [scheduler.submit(GenerationRequest(f"r{i}", 200 + 150 * (i % 7), 20)) for i in range(30)]
        consumers = [asyncio.create_task(collect(s)) for s in streams]
        for i, stream in enumerate(streams):
            await asyncio.sleep(0.002 * (i % 3))
            if i % 2 == 0:
                stream.cancel()
        await asyncio.gather(*consumers)
        assert all(s.stats.cancelled for s in streams[::2])
        assert all(s.stats.completion_tokens == 20 for s in streams[1::2])
        assert_empty(scheduler, metrics)


async def test_a_consumer_waiting_with_a_timeout_does_not_cancel_the_request() -> None:
    async with running(SchedulerConfig(cost=COST)) as (scheduler, _):
        stream = scheduler.submit(GenerationRequest("slow", 2000, 3))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stream.__anext__(), timeout=0.005)
        assert not stream.stats.cancelled
        assert len(await collect(stream)) == 3
