"""Calibrate the lab's scheduler against the source article's queueing claim.

The article (reference/source-article.txt) reports an average queue wait of 800 ms under FIFO against 120 ms under
priority-based scheduling, blamed on long-context requests blocking short ones. This benchmark runs the lab's real
scheduler in-process, in real time, with ``CostModel.default()`` (a 7B-class model on one 80 GB GPU) and the mixed
workload below, once per policy, and prints where the time goes.

Workload (every number here is an input, chosen so that the engine is busy but stable):

- short chat requests: a Poisson stream of 8 requests/s, prompts uniform in 100–800 tokens, outputs uniform in
  32–128 tokens;
- long-context requests: a Poisson stream of 0.3 requests/s, prompts uniform in 16 384–32 768 tokens (one takes
  0.7–1.6 s to prefill unchunked), outputs uniform in 32–128 tokens;
- arrivals during 20 s, then the run drains (at most 20 s more; anything left is cancelled and reported);
- 3 replicas per policy (seeds 7, 8, 9): the same three arrival sequences for both policies. All six schedulers run
  at once in one event loop, so the whole benchmark takes about 25 s.

Queue wait is vLLM's definition: first scheduled − queued. TTFT is first token − arrival. Throughput is generated
tokens per second of one server, from its first arrival to its last completion.

The same arrivals are also replayed through the engine core on a virtual clock (instant, no event loop): the two
tables should agree, which checks that the real-time loop adds no delay of its own.

Usage: ``python benchmarks/lab_queue.py [--duration S] [--replicas N] [--seed N] [--virtual-only]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass

from latscope.lab.costmodel import CostModel
from latscope.lab.engine import EngineCore, RequestStats, simulate
from latscope.lab.scheduler import GenerationRequest, Policy, RequestStream, Scheduler, SchedulerConfig

SHORT_RATE_PER_S = 8.0
SHORT_PROMPT_TOKENS = (100, 800)
SHORT_OUTPUT_TOKENS = (32, 128)
LONG_RATE_PER_S = 0.3
LONG_PROMPT_TOKENS = (16_384, 32_768)
LONG_OUTPUT_TOKENS = (32, 128)
DURATION_S = 20.0
DRAIN_LIMIT_S = 20.0
REPLICAS = 3
SEED = 7

Arrivals = list[tuple[int, GenerationRequest]]


def workload(seed: int, duration_s: float) -> Arrivals:
    """The documented mixed workload: (arrival ns from the start, request) pairs in arrival order."""
    rng = random.Random(seed)
    arrivals: Arrivals = []
    streams = (
        ("short", SHORT_RATE_PER_S, SHORT_PROMPT_TOKENS, SHORT_OUTPUT_TOKENS),
        ("long", LONG_RATE_PER_S, LONG_PROMPT_TOKENS, LONG_OUTPUT_TOKENS),
    )
    for kind, rate, prompt, output in streams:
        t = 0.0
        for n in range(1_000_000):  # bounded: ends at the duration long before this
            t += rng.expovariate(rate)
            if t >= duration_s:
                break
            request = GenerationRequest(f"{kind}-{seed}-{n}", rng.randint(*prompt), rng.randint(*output))
            arrivals.append((round(t * 1e9), request))
    return sorted(arrivals, key=lambda pair: pair[0])


@dataclass
class Row:
    policy: str
    short_queue_ms: float
    short_p95_ttft_ms: float
    long_queue_ms: float
    throughput_tok_s: float
    finished: int
    total: int


def summarise(policy: str, runs: list[list[RequestStats]]) -> Row:
    """Pool the replicas of one policy into a table row."""
    everything = [s for run in runs for s in run]
    short = [s for s in everything if s.request_id.startswith("short") and s.first_token_ns is not None]
    long = [s for s in everything if s.request_id.startswith("long") and s.scheduled_ns is not None]
    short_ttft = [s.ttft_ms for s in short if s.ttft_ms is not None]
    throughputs = []
    for run in runs:
        done = [s for s in run if s.finished_ns is not None]
        if not done:
            continue
        makespan_s = (max(s.finished_ns for s in done if s.finished_ns) - min(s.arrived_ns for s in run)) / 1e9
        throughputs.append(sum(s.completion_tokens for s in run) / makespan_s)
    return Row(
        policy=policy,
        short_queue_ms=statistics.mean(s.queue_ms for s in short if s.queue_ms is not None),
        short_p95_ttft_ms=statistics.quantiles(short_ttft, n=20)[18],
        long_queue_ms=statistics.mean(s.queue_ms for s in long if s.queue_ms is not None),
        throughput_tok_s=statistics.mean(throughputs),
        finished=sum(1 for s in everything if s.finished_ns is not None and not s.cancelled),
        total=len(everything),
    )


def print_table(title: str, rows: list[Row]) -> None:
    print(title)
    header = (
        f"{'policy':<9} | {'short mean queue wait ms':>24} | {'short p95 TTFT ms':>17} | "
        f"{'long mean queue wait ms':>23} | {'throughput tok/s':>16} | {'finished':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.policy:<9} | {r.short_queue_ms:>24.0f} | {r.short_p95_ttft_ms:>17.0f} | {r.long_queue_ms:>23.0f} | "
            f"{r.throughput_tok_s:>16.0f} | {r.finished:>4}/{r.total:<4}"
        )
    if len(rows) == 2 and rows[1].short_queue_ms > 0:
        print(f"FIFO / PRIORITY short-request queue wait: {rows[0].short_queue_ms / rows[1].short_queue_ms:.1f}x")
    print()


async def replay(scheduler: Scheduler, arrivals: Arrivals, drain_limit_s: float) -> list[RequestStats]:
    """Submit each request at its arrival time, consume every stream, cancel what is left after the drain limit."""
    started = time.monotonic_ns()
    streams: list[RequestStream] = []
    consumers: list[asyncio.Task[None]] = []
    for at, request in arrivals:
        delay = (started + at - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        stream = scheduler.submit(request)
        streams.append(stream)
        consumers.append(asyncio.create_task(_drain(stream)))
    _, pending = await asyncio.wait(consumers, timeout=drain_limit_s)
    for stream in streams:
        stream.cancel()
    if pending:
        await asyncio.wait(pending)
    return [s.stats for s in streams]


async def _drain(stream: RequestStream) -> None:
    async for _ in stream:
        pass


async def run_real_time(workloads: list[Arrivals], cost: CostModel, drain_limit_s: float) -> dict[Policy, Row]:
    schedulers = {
        (policy, i): Scheduler(SchedulerConfig(policy=policy, cost=cost))
        for policy in Policy
        for i in range(len(workloads))
    }
    for scheduler in schedulers.values():
        await scheduler.start()
    try:
        keys = list(schedulers)
        results = await asyncio.gather(*(replay(schedulers[k], workloads[k[1]], drain_limit_s) for k in keys))
    finally:
        for scheduler in schedulers.values():
            await scheduler.stop()
    by_policy: dict[Policy, list[list[RequestStats]]] = {policy: [] for policy in Policy}
    for (policy, _), stats in zip(keys, results, strict=True):
        by_policy[policy].append(stats)
    return {policy: summarise(policy.value, runs) for policy, runs in by_policy.items()}


def run_virtual(workloads: list[Arrivals], cost: CostModel) -> dict[Policy, Row]:
    return {
        policy: summarise(policy.value, [simulate(EngineCore(policy, cost), arrivals) for arrivals in workloads])
        for policy in Policy
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=DURATION_S, help="seconds of arrivals per replica")
    parser.add_argument("--replicas", type=int, default=REPLICAS, help="replicas per policy (seeds seed, seed+1, …)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--virtual-only", action="store_true", help="skip the real-time run")
    args = parser.parse_args(argv)

    cost = CostModel.default()
    workloads = [workload(args.seed + i, args.duration) for i in range(args.replicas)]
    n_short = sum(1 for w in workloads for _, r in w if r.request_id.startswith("short"))
    n_long = sum(len(w) for w in workloads) - n_short
    print(
        f"workload: {args.replicas} replica(s) x {args.duration:g} s, {n_short} short + {n_long} long requests, "
        f"seed {args.seed}; cost model: CostModel.default()\n"
    )
    if not args.virtual_only:
        started = time.perf_counter()
        real = asyncio.run(run_real_time(workloads, cost, DRAIN_LIMIT_S))
        print_table(f"real time (scheduler in-process, {time.perf_counter() - started:.1f} s)", list(real.values()))
    virtual = run_virtual(workloads, cost)
    print_table("virtual clock (engine core alone, same arrivals)", list(virtual.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
