"""The saturation experiment: a bounded concurrency sweep of identical short requests.

Level 1 is :data:`LONE_REQUESTS` requests one after another (the lone TTFT and a lone request's end-to-end time);
every further level sends ``c`` requests at once on a client of ``c`` connections, first to open the connections
(not measured: a server accepting ``c`` new connections at once takes them in one by one, so their requests reach
its engine over several of its steps), then :data:`ROUNDS` times on them. The sweep stops one level after requests
started to wait for a slot (:func:`latscope.checks.saturation.level_waited`), at :data:`LEVELS`' end, or when a
level took longer than :data:`LEVEL_BUDGET_S`. The target's metrics are scraped throughout
(:mod:`latscope.diagnose.metrics`): its waiting- and running-requests gauges confirm a queue where it has them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from latscope.checks.evidence import RequestSample, SaturationEvidence, SaturationLevel
from latscope.checks.saturation import level_waited, lone_rtt_ms
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.diagnose.metrics import scraping
from latscope.signals import NotAvailable
from latscope.signals.windowstats import gauge_series
from latscope.timeline.model import Timeline
from latscope.units import NS_PER_MS
from latscope.wire import Client

PROMPT_TOKENS = 16
MAX_TOKENS = 16
LONE_REQUESTS = 3
LEVELS = (2, 4, 8, 16, 32)
LEVELS_QUICK = (2, 4, 8, 16)
ROUNDS = 2
#: A level that took longer than this (s) ends the sweep: the endpoint is slow enough that the next would take far
#: longer, and the levels measured so far already show whether requests waited.
LEVEL_BUDGET_S = 8.0


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends at most."""
    return LONE_REQUESTS + (1 + ROUNDS) * sum(LEVELS_QUICK if quick else LEVELS)


async def run(ctx: Context, prior: Prior) -> SaturationEvidence:
    """Run the saturation experiment (see the module docstring)."""
    levels: list[SaturationLevel] = []
    starts: list[tuple[int, float]] = []
    began = time.monotonic()
    async with scraping(ctx) as scrape:
        await _sweep(ctx, levels, lambda c: starts.append((c, round(time.monotonic() - began, 3))))
    window = scrape.result
    if isinstance(window, NotAvailable):
        return SaturationEvidence(PROMPT_TOKENS, MAX_TOKENS, tuple(levels), metrics=f"no metrics: {window.why}")
    stats = window.stats
    if stats is None:
        return SaturationEvidence(
            PROMPT_TOKENS, MAX_TOKENS, tuple(levels), metrics=f"metrics at {window.url} of no known server family"
        )
    series = tuple((at, running, waiting) for at, running, waiting, _ in gauge_series(stats, began))
    return SaturationEvidence(
        PROMPT_TOKENS,
        MAX_TOKENS,
        tuple(levels),
        waiting_gauge=None if stats.waiting is None else stats.waiting.max,
        running_gauge=None if stats.running is None else stats.running.max,
        metrics=f"{stats.family} metrics at {window.url}",
        batch_series=series,
        level_starts=tuple(starts),
    )


async def _sweep(ctx: Context, levels: list[SaturationLevel], started: Callable[[int], None]) -> None:
    """The levels, appended to ``levels`` as they complete; ``started(concurrency)`` as each begins."""
    started(1)
    async with ctx.client(quickack=True) as client:
        lone = tuple(await ctx.send_series(client, LONE_REQUESTS, PROMPT_TOKENS, MAX_TOKENS, "concurrency 1"))
    levels.append(SaturationLevel(1, (lone,)))
    ok = [s for s in lone if s.ok and s.ttft_after_setup_ms is not None and s.e2e_after_setup_ms is not None]
    if not ok:
        return
    lone_ttft = min(s.ttft_after_setup_ms or 0.0 for s in ok)
    lone_e2e = min(s.e2e_after_setup_ms or 0.0 for s in ok)
    rtt = lone_rtt_ms(ok)
    for concurrency in LEVELS_QUICK if ctx.quick else LEVELS:
        started(concurrency)
        begun = time.monotonic()
        bursts: list[tuple[RequestSample, ...]] = []
        lags: list[tuple[float | None, ...]] = []
        async with ctx.client(quickack=True, max_connections_per_origin=concurrency) as client:
            await _burst(ctx, client, concurrency, "connections")
            for round_index in range(ROUNDS):
                samples, burst_lags = await _burst(ctx, client, concurrency, f"round {round_index + 1}")
                bursts.append(samples)
                lags.append(burst_lags)
        level = SaturationLevel(concurrency, tuple(bursts), tuple(lags))
        levels.append(level)
        if level_waited(level, lone_ttft, lone_e2e, rtt) or time.monotonic() - begun > LEVEL_BUDGET_S:
            break
        if all(not s.ok for s in level.samples):
            break


async def _burst(
    ctx: Context, client: Client, concurrency: int, name: str
) -> tuple[tuple[RequestSample, ...], tuple[float | None, ...]]:
    """``concurrency`` requests at once (labelled with ``name``): their samples, and how long after the earliest
    first token of the others each one's first token came, ms (None where either is missing)."""
    label = f"concurrency {concurrency} {name}"
    timelines = [Timeline() for _ in range(concurrency)]
    samples = await asyncio.gather(
        *(
            ctx.send(client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label=f"{label} #{n + 1}", timeline=timelines[n])
            for n in range(concurrency)
        )
    )
    lags: list[float | None] = []
    for n, t in enumerate(timelines):
        firsts = [o.first_token_ns for m, o in enumerate(timelines) if m != n and o.first_token_ns is not None]
        mine = t.first_token_ns
        lags.append(None if mine is None or not firsts else (mine - min(firsts)) / NS_PER_MS)
    return tuple(samples), tuple(lags)


EXPERIMENT = Experiment(
    family="saturation",
    description="identical short requests at growing concurrency: where do they start to wait for a slot?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
