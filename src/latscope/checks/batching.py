"""``batching-window``: a dynamic batcher holds a lone request until more arrive or its window expires.

Mechanism: two short requests sent a little apart, with nothing else in flight. An engine that schedules a request
as soon as it is ready (continuous batching, a slot free) gives the second its first token at least the offset
after the first's — later still when it waits for the first's step to end. A batching window holds the first
until the second joins it, so both get their first tokens together: the gap between them collapses while the
offset between the sends did not. A fixed per-request cost (a slow tokenizer, a gateway hop, the network) delays
each request by itself and never closes that gap, so it is not taken for a window.

The window's length a lone request pays lies between the largest offset whose pair still started together and the
smallest that did not (or, when every pair did, the idle TTFT beyond the round trip: the window cannot be longer
than the wait it explains). Offsets are fractions of that idle wait, so the experiment scales with the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

BATCHING_ID = "batching-window"

#: A pair started together when its first tokens came less than this share of the offset apart: a request that
#: waits for nothing gets its first token the whole offset (or more) after the first's.
TOGETHER_SHARE = 0.35
#: Pairs sent closer than this (ms) are left out: timer and scheduling noise is of that order.
MIN_OFFSET_MS = 1.0
#: An idle TTFT beyond the round trip below this (ms) leaves no room for a window worth reporting.
MIN_IDLE_WAIT_MS = 4.0
#: Pairs needed to decide, and how many of the pairs at the smallest offset must agree.
MIN_PAIRS = 3
#: The window is found when at least this share of the pairs at offsets below the estimated window started together.
FINDING_SHARE = 0.75


@dataclass(frozen=True, slots=True)
class PairPoint:
    """Two short requests sent ``offset_ms`` apart on two connections with nothing else in flight, and the gap
    between their first tokens (ms, second − first; negative when the second came first)."""

    offset_ms: float
    first_token_gap_ms: float


@dataclass(frozen=True, slots=True)
class BatchingEvidence:
    """The batching experiment. TTFTs are ``ttft_after_setup_ms`` (the client's connection setup excluded).

    Fields:
        prompt_tokens: the short prompt's size (about).
        alone_ms: short TTFTs with nothing else in flight.
        pairs: staggered pairs, in the order sent (offsets are fractions of the idle TTFT beyond the round trip).
        rtt_ms: the connections' TCP round-trip time (None where not reported).
        failures: requests that failed.
    """

    prompt_tokens: int
    alone_ms: tuple[float, ...] = ()
    pairs: tuple[PairPoint, ...] = ()
    rtt_ms: float | None = None
    failures: tuple[RequestSample, ...] = ()


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def together(pair: PairPoint) -> bool:
    """The pair's second request got its first token with the first's: closer than :data:`TOGETHER_SHARE` of the
    offset between their sends."""
    return abs(pair.first_token_gap_ms) < TOGETHER_SHARE * pair.offset_ms


def idle_wait_ms(ev: BatchingEvidence) -> float | None:
    """The fastest short TTFT alone less the round trip (ms): the most a window can hold a lone request."""
    if not ev.alone_ms:
        return None
    return max(0.0, min(ev.alone_ms) - (ev.rtt_ms or 0.0))


def check_batching_window(ev: BatchingEvidence, reference: Reference | None) -> Outcome:
    """Finding when staggered pairs of short requests, with nothing else in flight, get their first tokens together
    (:data:`TOGETHER_SHARE`); the cost is the window a lone request waits out."""
    broken = failures.too_many_failed(ev.failures, ok_elsewhere=len(ev.alone_ms) + 2 * len(ev.pairs))
    if broken:
        return NotTested(BATCHING_ID, f"the target misbehaved during the batching experiment: {broken}")
    idle = idle_wait_ms(ev)
    if idle is None:
        reason = failures.summarise(ev.failures) or "no short request completed"
        return NotTested(BATCHING_ID, f"the batching experiment could not measure: {reason}")
    evidence: dict[str, Any] = {
        "short_alone_ms": _round(min(ev.alone_ms)),
        "short_alone_p50_ms": _round(median(ev.alone_ms)),
        "rtt_ms": _round(ev.rtt_ms),
        "idle_wait_ms": _round(idle),
        "pairs": [
            {
                "offset_ms": _round(p.offset_ms),
                "first_token_gap_ms": _round(p.first_token_gap_ms),
                "together": together(p),
            }
            for p in ev.pairs
        ],
    }
    if idle < MIN_IDLE_WAIT_MS:
        return Clear(
            BATCHING_ID,
            f"a short request alone gets its first token {idle:.1f} ms beyond the round trip: no room for a batching "
            "window",
            evidence,
        )
    if len(ev.pairs) < MIN_PAIRS:
        return NotTested(BATCHING_ID, f"only {len(ev.pairs)} staggered pair(s) completed (needs {MIN_PAIRS})")
    pairs = [p for p in ev.pairs if p.offset_ms >= MIN_OFFSET_MS]
    if len(pairs) < MIN_PAIRS:
        return NotTested(
            BATCHING_ID, f"only {len(pairs)} staggered pair(s) were sent {MIN_OFFSET_MS:g} ms or more apart"
        )
    joined = [p.offset_ms for p in pairs if together(p)]
    apart = [p.offset_ms for p in pairs if not together(p)]
    evidence["pairs_together"] = len(joined)
    if not joined:
        return Clear(
            BATCHING_ID,
            f"0 of {len(pairs)} pairs sent {min(apart):.1f}–{max(apart):.1f} ms apart got their first tokens "
            "together: each request was scheduled when it arrived",
            evidence,
        )
    low = max(joined)
    high = min((o for o in apart if o > low), default=idle)
    below = [p for p in pairs if p.offset_ms <= low]
    share = sum(1 for p in below if together(p)) / len(below)
    evidence["window_lower_ms"] = _round(low)
    evidence["window_upper_ms"] = _round(high)
    if share < FINDING_SHARE or len(joined) < 2:
        return Inconclusive(
            BATCHING_ID,
            f"{len(joined)} of {len(pairs)} staggered pairs got their first tokens together, without a pattern "
            "of offsets a window explains; run again",
            evidence,
        )
    cost = (low + high) / 2.0
    evidence["window_ms"] = _round(cost)
    return costed_finding(
        BATCHING_ID,
        cost,
        reference,
        cost_basis=(
            f"ms a lone request waits for the batch: the window lies between {low:.1f} ms (the largest offset whose "
            f"second request still got its first token with the first's) and {high:.1f} ms ("
            + ("the smallest offset that did not" if high < idle else "the idle TTFT beyond the round trip")
            + ")"
        ),
        evidence=evidence,
        rule=(
            f"{len(joined)} of {len(pairs)} pairs of short requests sent {min(joined):.1f}–{low:.1f} ms apart, "
            f"nothing else in flight, got their first tokens within {TOGETHER_SHARE:.0%} of the offset of each other"
        ),
        confidence=Confidence.HIGH if len(joined) >= 4 else Confidence.MEDIUM,
    )
