"""FIFO blocks short requests behind long prefills; PRIORITY (shortest first + chunked prefill) does not.

The documented workload (costs shortened so a run takes about two seconds):

- engine: prefill 1 ms + 0.02 ms/token + 2e-7 ms/token² (a 7k-token prompt ≈ 150 ms unchunked), decode
  2 ms + 0.02 ms/sequence, chunk 256 tokens;
- long-context requests: 5, one every 300 ms from t = 50 ms, 6144–8192 prompt tokens, 8 output tokens
  (about half the engine's time goes to their prefill);
- short chat requests: a Poisson stream of 60/s for 1.5 s, 32–256 prompt tokens, 4–16 output tokens;
- seed 11 for every draw.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from latscope.lab.costmodel import CostModel
from latscope.lab.engine import EngineCore, RequestStats, TokenOut, simulate
from latscope.lab.scheduler import (
    GenerationRequest,
    Policy,
    RequestStream,
    Scheduler,
    SchedulerConfig,
)

NS_PER_MS = 1_000_000

COST = CostModel(
    prefill_base_ms=1.0,
    prefill_per_token_ms=0.02,
    prefill_quadratic_ms=2e-7,
    decode_base_ms=2.0,
    decode_per_seq_ms=0.02,
    kv_blocks=8192,
    max_batch=64,
    chunk_tokens=256,
)
SEED = 11


def mixed_workload(seed: int = SEED) -> list[tuple[int, GenerationRequest]]:
    """(arrival ns from 0, request) pairs of the documented workload."""
    rng = random.Random(seed)
    arrivals = [
        (round((0.05 + 0.3 * k) * 1e9), GenerationRequest(f"long-{k}", rng.randint(6144, 8192), 8)) for k in range(5)
    ]
    t = 0.0
    for n in range(1000):  # bounded; ~90 arrivals in 1.5 s
        t += rng.expovariate(60.0)
        if t >= 1.5:
            break
        arrivals.append((round(t * 1e9), GenerationRequest(f"short-{n}", rng.randint(32, 256), rng.randint(4, 16))))
    return sorted(arrivals, key=lambda pair: pair[0])


def mean_queue_ms(stats: list[RequestStats], prefix: str) -> float:
    return statistics.mean(s.queue_ms for s in stats if s.request_id.startswith(prefix) and s.queue_ms is not None)


@asynccontextmanager
async def running(config: SchedulerConfig) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(config)
    await scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()


async def replay(scheduler: Scheduler, arrivals: list[tuple[int, GenerationRequest]]) -> list[RequestStats]:
    """Submit each request at its arrival time (real time), consume every stream, return the stats."""
    started = time.monotonic_ns()
    consumers: list[asyncio.Task[list[TokenOut]]] = []
    streams: list[RequestStream] = []
    for at, request in arrivals:
        delay = (started + at - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        stream = scheduler.submit(request)
        streams.append(stream)
        consumers.append(asyncio.create_task(_collect(stream)))
    await asyncio.gather(*consumers)
    return [s.stats for s in streams]


async def _collect(stream: RequestStream) -> list[TokenOut]:
    return [token async for token in stream]


class ListSink:
    def __init__(self) -> None:
        self.tokens: list[TokenOut] = []

    def push(self, token: TokenOut) -> None:
        self.tokens.append(token)

    def close(self, error: str | None) -> None:
        pass


# -- the headline: short requests queue behind long prefills under FIFO ---------------------------------------------


def test_fifo_makes_short_requests_wait_several_times_longer_on_the_virtual_clock() -> None:
    workload = mixed_workload()
    fifo = simulate(EngineCore(Policy.FIFO, COST), workload)
    priority = simulate(EngineCore(Policy.PRIORITY, COST), workload)
    assert all(s.finished_ns is not None for s in fifo + priority)
    assert mean_queue_ms(fifo, "short") > 4 * mean_queue_ms(priority, "short")


async def test_fifo_makes_short_requests_wait_several_times_longer_in_real_time() -> None:
    workload = mixed_workload()
    async with (
        running(SchedulerConfig(policy=Policy.FIFO, cost=COST)) as fifo,
        running(SchedulerConfig(policy=Policy.PRIORITY, cost=COST)) as priority,
    ):
        fifo_stats, priority_stats = await asyncio.gather(replay(fifo, workload), replay(priority, workload))
    fifo_wait = mean_queue_ms(fifo_stats, "short")
    priority_wait = mean_queue_ms(priority_stats, "short")
    assert fifo_wait > 3 * priority_wait, (fifo_wait, priority_wait)


# -- chunked prefill ------------------------------------------------------------------------------------------------


async def test_a_short_request_is_served_within_a_few_chunk_steps_while_a_long_prefill_runs() -> None:
    cost = COST.with_overrides(prefill_per_token_ms=0.04, prefill_quadratic_ms=0.0)  # 256-token chunk ≈ 11 ms
    chunk_step_ms = cost.prefill_base_ms + cost.prefill_chunk_ms(0, cost.chunk_tokens)
    ttft: dict[Policy, float] = {}
    for policy in Policy:
        async with running(SchedulerConfig(policy=policy, cost=cost)) as scheduler:
            long = scheduler.submit(GenerationRequest("long", 4096, 2))  # 16 chunks, 165 ms unchunked
            await asyncio.sleep(2.5 * chunk_step_ms / 1000)
            short = scheduler.submit(GenerationRequest("short", 64, 2))
            await asyncio.gather(_collect(long), _collect(short))
            assert short.stats.ttft_ms is not None
            ttft[policy] = short.stats.ttft_ms
    assert ttft[Policy.PRIORITY] <= 4 * chunk_step_ms
    assert ttft[Policy.FIFO] > 3 * ttft[Policy.PRIORITY]


def test_a_prompt_that_fits_the_chunk_gets_its_first_token_after_one_step() -> None:
    long = GenerationRequest("long", 4096, 2)
    short = GenerationRequest("short", COST.chunk_tokens // 2, 2)
    stats = simulate(EngineCore(Policy.PRIORITY, COST), [(0, long), (1, short)])
    short_stats = stats[1]
    assert short_stats.first_token_ns is not None and short_stats.scheduled_ns is not None
    # Admitted at the next step boundary, first token at the end of that same step.
    first_step_ns = round((COST.prefill_base_ms + COST.prefill_chunk_ms(0, COST.chunk_tokens)) * NS_PER_MS)
    assert short_stats.scheduled_ns == first_step_ns
    step_ns = short_stats.first_token_ns - short_stats.scheduled_ns
    half = COST.chunk_tokens // 2
    expected_ms = COST.prefill_base_ms + COST.prefill_chunk_ms(0, half) + COST.prefill_chunk_ms(COST.chunk_tokens, half)
    assert step_ns == round(expected_ms * NS_PER_MS)


def test_fifo_pauses_decoding_for_a_whole_long_prefill_and_priority_interleaves() -> None:
    long_prefill_ms = COST.prefill_ms(8192)
    worst_gap_ms: dict[Policy, float] = {}
    for policy in Policy:
        sinks: dict[str, ListSink] = {}

        def sink_for(request: GenerationRequest, sinks: dict[str, ListSink] = sinks) -> ListSink:
            return sinks.setdefault(request.request_id, ListSink())

        arrivals = [(0, GenerationRequest("chat", 32, 60)), (20 * NS_PER_MS, GenerationRequest("long", 8192, 1))]
        simulate(EngineCore(policy, COST), arrivals, sink_for=sink_for)
        ready = [t.ready_ns for t in sinks["chat"].tokens]
        worst_gap_ms[policy] = max(b - a for a, b in itertools.pairwise(ready)) / NS_PER_MS
    assert worst_gap_ms[Policy.FIFO] >= long_prefill_ms
    chunk_step_ms = COST.prefill_base_ms + COST.prefill_chunk_ms(8192 - 256, 256) + COST.decode_step_ms(1)
    assert worst_gap_ms[Policy.PRIORITY] <= chunk_step_ms + 1e-6


# -- ordering ----------------------------------------------------------------------------------------------------------


def test_fifo_admits_strictly_in_arrival_order() -> None:
    # Busy engine (a long prefill), then a long and a short request queue up: the short waits for the long.
    arrivals = [
        (0, GenerationRequest("busy", 8192, 1)),
        (1, GenerationRequest("long", 8192, 1)),
        (2, GenerationRequest("short", 32, 1)),
    ]
    busy, long, short = simulate(EngineCore(Policy.FIFO, COST), arrivals)
    assert busy.scheduled_ns is not None and long.scheduled_ns is not None and short.scheduled_ns is not None
    assert busy.scheduled_ns <= long.scheduled_ns <= short.scheduled_ns
    assert short.first_token_ns is not None and long.first_token_ns is not None
    assert short.first_token_ns >= long.first_token_ns  # the whole long prefill ran before the short one


def test_fifo_head_that_does_not_fit_blocks_everyone_behind_it() -> None:
    small_cache = COST.with_overrides(kv_blocks=600)  # 9600 tokens
    arrivals = [
        (0, GenerationRequest("running", 6000, 30)),
        (1, GenerationRequest("head", 6000, 1)),  # cannot fit until "running" finishes
        (2, GenerationRequest("short", 32, 1)),  # would fit, but is behind the head
    ]
    running_, head, short = simulate(EngineCore(Policy.FIFO, small_cache), arrivals)
    assert running_.finished_ns is not None and head.scheduled_ns is not None and short.scheduled_ns is not None
    assert head.scheduled_ns >= running_.finished_ns
    assert short.scheduled_ns >= head.scheduled_ns


def test_priority_serves_the_shortest_waiting_prompt_first() -> None:
    arrivals = [
        (0, GenerationRequest("busy", 4096, 1)),
        (1, GenerationRequest("medium", 2048, 1)),
        (2, GenerationRequest("tiny", 16, 1)),
    ]
    busy, medium, tiny = simulate(EngineCore(Policy.PRIORITY, COST), arrivals)
    assert tiny.first_token_ns is not None and medium.first_token_ns is not None
    assert tiny.first_token_ns < medium.first_token_ns
    assert busy.finished_ns is not None
