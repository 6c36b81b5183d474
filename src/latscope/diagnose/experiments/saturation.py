"""The saturation experiment: a bounded concurrency sweep of identical short requests.

Level 1 is :data:`LONE_REQUESTS` requests one after another (the lone TTFT and a lone request's end-to-end time).
Each request generates :data:`MAX_TOKENS` tokens, unless a lone request streams them in less than
:data:`TARGET_SERVICE_SPAN_MS`: then level 1 is measured again with streams lengthened in proportion (up to
:data:`MAX_TOKENS_CEILING`), and the whole sweep uses that length. A wait for a slot shows as a share of a lone
stream, so a stream of a few milliseconds (a tiny model on a fast engine) hides it in noise.

Every further level sends ``c`` requests at once on a client of ``c`` connections, first to open the connections
(not measured: a server accepting ``c`` new connections at once takes them in one by one, so their requests reach
its engine over several of its steps), then :data:`ROUNDS` times on them. A round in which nobody waited although
another round of the level had waiters, and whose earliest first token already came late (the server was busy
before the burst began: :func:`latscope.checks.saturation.busy_at_start`), is sent again, up to :data:`REPEATS`
times a level; the rounds set aside stay in the evidence. The sweep stops one level after requests
started to wait for a slot (:func:`latscope.checks.saturation.level_waited`), at :data:`LEVELS`' end, or when a
level took longer than :data:`LEVEL_BUDGET_S`. The target's metrics are scraped throughout
(:mod:`latscope.diagnose.metrics`): its waiting- and running-requests gauges confirm a queue where it has them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from latscope.checks.samples import RequestSample
from latscope.checks.saturation import (
    SaturationEvidence,
    SaturationLevel,
    busy_at_start,
    level_waited,
    lone_rtt_ms,
    needed_waiters,
    waiters,
)
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
#: A lone stream (first token to last) shorter than this (ms) is lengthened: waiting for a slot is told by a share of
#: it, four times :data:`latscope.checks.saturation.MIN_SERVICE_SPAN_MS` keeps that share clear of noise.
TARGET_SERVICE_SPAN_MS = 40.0
#: The most tokens a lengthened stream asks for.
MAX_TOKENS_CEILING = 256
LONE_REQUESTS = 3
LEVELS = (2, 4, 8, 16, 32)
LEVELS_QUICK = (2, 4, 8, 16)
ROUNDS = 2
#: Rounds a level may send again, at most, in place of one that began on a busy server (:func:`_held_up`).
REPEATS = 2
#: A level that took longer than this (s) ends the sweep: the endpoint is slow enough that the next would take far
#: longer, and the levels measured so far already show whether requests waited.
LEVEL_BUDGET_S = 8.0


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends at most."""
    return 2 * LONE_REQUESTS + (1 + ROUNDS + REPEATS) * sum(LEVELS_QUICK if quick else LEVELS)


def lengthened_max_tokens(lone_span_ms: float, max_tokens: int = MAX_TOKENS) -> int:
    """Tokens a stream needs to last about :data:`TARGET_SERVICE_SPAN_MS` when ``max_tokens`` of them took
    ``lone_span_ms`` from first token to last (``max_tokens`` when they already last that long; at most
    :data:`MAX_TOKENS_CEILING`)."""
    if lone_span_ms >= TARGET_SERVICE_SPAN_MS:
        return max_tokens
    scaled = math.ceil(max_tokens * TARGET_SERVICE_SPAN_MS / max(lone_span_ms, 1.0))
    return max(max_tokens, min(MAX_TOKENS_CEILING, scaled))


async def run(ctx: Context, prior: Prior) -> SaturationEvidence:
    """Run the saturation experiment (see the module docstring)."""
    levels: list[SaturationLevel] = []
    starts: list[tuple[int, float]] = []
    began = time.monotonic()
    async with scraping(ctx) as scrape:
        max_tokens = await _sweep(ctx, levels, lambda c: starts.append((c, round(time.monotonic() - began, 3))))
    window = scrape.result
    if isinstance(window, NotAvailable):
        return SaturationEvidence(PROMPT_TOKENS, max_tokens, tuple(levels), metrics=f"no metrics: {window.why}")
    stats = window.stats
    if stats is None:
        return SaturationEvidence(
            PROMPT_TOKENS, max_tokens, tuple(levels), metrics=f"metrics at {window.url} of no known server family"
        )
    series = tuple((at, running, waiting) for at, running, waiting, _ in gauge_series(stats, began))
    return SaturationEvidence(
        PROMPT_TOKENS,
        max_tokens,
        tuple(levels),
        waiting_gauge=None if stats.waiting is None else stats.waiting.max,
        running_gauge=None if stats.running is None else stats.running.max,
        metrics=f"{stats.family} metrics at {window.url}",
        batch_series=series,
        level_starts=tuple(starts),
    )


async def _sweep(ctx: Context, levels: list[SaturationLevel], started: Callable[[int], None]) -> int:
    """The levels, appended to ``levels`` as they complete; ``started(concurrency)`` as each begins. Returns the
    tokens each request generated."""
    started(1)
    max_tokens = MAX_TOKENS
    async with ctx.client(quickack=True) as client:
        lone = tuple(await ctx.send_series(client, LONE_REQUESTS, PROMPT_TOKENS, max_tokens, "concurrency 1"))
        ok = _timed(lone)
        if ok:
            span = min(s.e2e_after_setup_ms or 0.0 for s in ok) - min(s.ttft_after_setup_ms or 0.0 for s in ok)
            longer = lengthened_max_tokens(span)
            if longer > max_tokens:
                max_tokens = longer
                lone = tuple(
                    await ctx.send_series(
                        client, LONE_REQUESTS, PROMPT_TOKENS, max_tokens, f"concurrency 1 ({max_tokens} tokens)"
                    )
                )
                ok = _timed(lone)
    levels.append(SaturationLevel(1, (lone,)))
    if not ok:
        return max_tokens
    lone_ttft = min(s.ttft_after_setup_ms or 0.0 for s in ok)
    lone_e2e = min(s.e2e_after_setup_ms or 0.0 for s in ok)
    rtt = lone_rtt_ms(ok)
    for concurrency in LEVELS_QUICK if ctx.quick else LEVELS:
        started(concurrency)
        begun = time.monotonic()
        bursts: list[tuple[RequestSample, ...]] = []
        lags: list[tuple[float | None, ...]] = []
        aside: list[tuple[RequestSample, ...]] = []
        async with ctx.client(quickack=True, max_connections_per_origin=concurrency) as client:
            await _burst(ctx, client, concurrency, max_tokens, "connections")
            for round_index in range(ROUNDS):
                samples, burst_lags = await _burst(ctx, client, concurrency, max_tokens, f"round {round_index + 1}")
                bursts.append(samples)
                lags.append(burst_lags)
            for repeat in range(REPEATS):
                level = SaturationLevel(concurrency, tuple(bursts), tuple(lags))
                held = _held_up(level, lone_ttft, lone_e2e, rtt)
                if held is None:
                    break
                aside.append(bursts[held])
                samples, burst_lags = await _burst(ctx, client, concurrency, max_tokens, f"repeat {repeat + 1}")
                bursts[held], lags[held] = samples, burst_lags
        level = SaturationLevel(concurrency, tuple(bursts), tuple(lags), tuple(aside))
        levels.append(level)
        if level_waited(level, lone_ttft, lone_e2e, rtt) or time.monotonic() - begun > LEVEL_BUDGET_S:
            break
        if all(not s.ok for s in level.samples):
            break
    return max_tokens


def _held_up(level: SaturationLevel, lone_ttft: float, lone_e2e: float, rtt: float | None) -> int | None:
    """The round to send again, if any: one without enough waiters that began on a busy server (:func:`busy_at_start`)
    while another round of the level had waiters. Where no round had any, nothing is sent again: a level whose
    every burst starts late (a large burst's prompts prefilled as one batch) is judged on its first tokens' lags."""
    counts = [waiters(level, i, lone_ttft, lone_e2e, rtt) for i in range(len(level.rounds))]
    if not any(counts):
        return None
    return next(
        (
            i
            for i, n in enumerate(counts)
            if n < needed_waiters(level.concurrency) and busy_at_start(level, i, lone_ttft, lone_e2e)
        ),
        None,
    )


def _timed(samples: tuple[RequestSample, ...]) -> list[RequestSample]:
    """The samples that succeeded with both a TTFT and an end-to-end time."""
    return [s for s in samples if s.ok and s.ttft_after_setup_ms is not None and s.e2e_after_setup_ms is not None]


async def _burst(
    ctx: Context, client: Client, concurrency: int, max_tokens: int, name: str
) -> tuple[tuple[RequestSample, ...], tuple[float | None, ...]]:
    """``concurrency`` requests at once of ``max_tokens`` tokens (labelled with ``name``): their samples, and how
    long after the earliest first token of the others each one's first token came, ms (None where either is
    missing)."""
    label = f"concurrency {concurrency} {name}"
    timelines = [Timeline() for _ in range(concurrency)]
    samples = await asyncio.gather(
        *(
            ctx.send(client, ctx.spec(PROMPT_TOKENS, max_tokens), label=f"{label} #{n + 1}", timeline=timelines[n])
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
