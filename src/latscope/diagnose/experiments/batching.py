"""The batching experiment: do two short requests sent a little apart, with nothing else in flight, start together?

1. Short requests alone on each of two warmed clients (one connection each, quickack on): the idle TTFT; less the
   round trip, the most a batching window could hold a lone request (its *idle wait*).
2. Pairs: one short request on the first client, another on the second :data:`PAIR_OFFSETS` × the idle wait later
   (capped at :data:`MAX_OFFSET_MS`); the gap between their first tokens against the measured offset between their
   sends. Each pair completes before the next is sent, so the engine is idle at every pair's start. Then a few
   pairs between the largest offset that started together and the smallest that did not narrow the window down.

An idle wait under :data:`~latscope.checks.batching.MIN_IDLE_WAIT_MS` leaves no window worth finding: the pairs are
skipped. ``max_tokens`` is 1 everywhere.
"""

from __future__ import annotations

import asyncio

from latscope.checks.batching import MIN_IDLE_WAIT_MS, BatchingEvidence, PairPoint, together
from latscope.checks.samples import RequestSample
from latscope.checks.stats import median
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.timeline.model import Timeline
from latscope.units import NS_PER_MS
from latscope.wire import Client

SHORT_PROMPT_TOKENS = 16
ALONE_PER_CLIENT = 3
ALONE_PER_CLIENT_QUICK = 2
#: Offsets of the second request, as fractions of the idle wait: a window longer than the largest is bounded by the
#: idle wait itself, one shorter than the smallest is below what is worth reporting.
PAIR_OFFSETS = (0.2, 0.45, 0.7, 0.9)
PAIR_OFFSETS_QUICK = (0.3, 0.6, 0.9)
PAIR_ROUNDS = 2
#: Pairs sent afterwards between the largest offset that started together and the smallest above it that did not,
#: halving that interval each time (three steps: within an eighth of it), while it is wider than
#: :data:`REFINE_MIN_SHARE` of the idle wait.
REFINE_STEPS = 3
REFINE_MIN_SHARE = 0.05
#: Longest offset (ms): a target whose idle TTFT is seconds long is not waiting for a batch that long; the pairs
#: stay short.
MAX_OFFSET_MS = 500.0
START_POLL_S = 0.0002


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends at most."""
    alone = 2 * (ALONE_PER_CLIENT_QUICK if quick else ALONE_PER_CLIENT)
    return alone + 2 * (PAIR_ROUNDS * len(PAIR_OFFSETS_QUICK if quick else PAIR_OFFSETS) + REFINE_STEPS)


async def run(ctx: Context, prior: Prior) -> BatchingEvidence:
    """Run the batching experiment (see the module docstring)."""
    alone: list[float] = []
    rtts: list[float] = []
    failed: list[RequestSample] = []
    pairs: list[PairPoint] = []

    def keep(sample: RequestSample) -> None:
        if not sample.ok:
            failed.append(sample)
        if sample.rtt_ms is not None:
            rtts.append(sample.rtt_ms)

    count = ALONE_PER_CLIENT_QUICK if ctx.quick else ALONE_PER_CLIENT
    async with ctx.client(quickack=True) as first, ctx.client(quickack=True) as second:
        for name, client in (("first", first), ("second", second)):
            for index in range(count):
                sample = await ctx.send(
                    client, ctx.spec(SHORT_PROMPT_TOKENS, 1), label=f"alone on the {name} client {index + 1}/{count}"
                )
                keep(sample)
                if sample.ok and sample.ttft_after_setup_ms is not None:
                    alone.append(sample.ttft_after_setup_ms)
        rtt = median(rtts)
        if not alone:
            return BatchingEvidence(SHORT_PROMPT_TOKENS, rtt_ms=rtt, failures=tuple(failed))
        idle = max(0.0, min(alone) - (rtt or 0.0))
        if idle >= MIN_IDLE_WAIT_MS:
            span = min(idle, MAX_OFFSET_MS)
            for round_index in range(PAIR_ROUNDS):
                for fraction in PAIR_OFFSETS_QUICK if ctx.quick else PAIR_OFFSETS:
                    label = f"pair {round_index + 1} at {fraction:.0%}"
                    pair = await _pair(ctx, first, second, fraction * span / 1000.0, label)
                    for sample in pair[:2]:
                        keep(sample)
                    if pair[2] is not None:
                        pairs.append(pair[2])
            for step in range(REFINE_STEPS):
                interval = _window_interval(pairs)
                if interval is None or interval[1] - interval[0] <= REFINE_MIN_SHARE * idle:
                    break
                offset = (interval[0] + interval[1]) / 2.0
                pair = await _pair(ctx, first, second, offset / 1000.0, f"pair refining {step + 1}")
                for sample in pair[:2]:
                    keep(sample)
                if pair[2] is not None:
                    pairs.append(pair[2])
    return BatchingEvidence(
        SHORT_PROMPT_TOKENS, alone_ms=tuple(alone), pairs=tuple(pairs), rtt_ms=rtt, failures=tuple(failed)
    )


def _window_interval(pairs: list[PairPoint]) -> tuple[float, float] | None:
    """The largest offset (ms) whose pair started together and the smallest above it whose pair did not; None
    until both exist."""
    joined = [p.offset_ms for p in pairs if together(p)]
    if not joined:
        return None
    low = max(joined)
    high = min((p.offset_ms for p in pairs if not together(p) and p.offset_ms > low), default=None)
    return None if high is None else (low, high)


async def _pair(
    ctx: Context, first: Client, second: Client, offset_s: float, label: str
) -> tuple[RequestSample, RequestSample, PairPoint | None]:
    """One short request on ``first``, another on ``second`` ``offset_s`` later; both samples and the pair (None
    unless both got a first token)."""
    lead, follow = Timeline(), Timeline()
    task = asyncio.create_task(ctx.send(first, ctx.spec(SHORT_PROMPT_TOKENS, 1), label=f"{label} first", timeline=lead))
    try:
        while lead.send_start_ns is None and not task.done():  # the offset counts from the first one's send
            await asyncio.sleep(START_POLL_S)
        await asyncio.sleep(offset_s)
        later = await ctx.send(second, ctx.spec(SHORT_PROMPT_TOKENS, 1), label=f"{label} second", timeline=follow)
        earlier = await task
    except BaseException:
        task.cancel()
        raise
    stamps = (lead.send_start_ns, follow.send_start_ns, lead.first_token_ns, follow.first_token_ns)
    if not (earlier.ok and later.ok) or any(s is None for s in stamps):
        return earlier, later, None
    sent_a, sent_b, token_a, token_b = (s or 0 for s in stamps)
    return earlier, later, PairPoint((sent_b - sent_a) / NS_PER_MS, (token_b - token_a) / NS_PER_MS)


EXPERIMENT = Experiment(
    family="batching",
    description="short requests alone and in staggered pairs: do they start together?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
