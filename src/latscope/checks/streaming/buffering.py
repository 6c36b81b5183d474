"""``stream-proxy-buffering``: a buffer in front of the stream holds tokens until it fills or the response ends
(see :mod:`latscope.checks.streaming`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, robust_sd
from latscope.checks.streaming.evidence import StreamEvidence, all_samples
from latscope.checks.streaming.measures import (
    ACK_CLOCK_GROWTH_SPACINGS,
    NOISE_Z,
    AckClock,
    SegmentFill,
    ack_clock,
    late_without_pileup,
    segment_fill,
    ttfts,
)
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Outcome

PROXY_ID = "stream-proxy-buffering"

#: A read completing this many token events or more is a burst (one event per read is an unbuffered stream).
BURST_EVENTS = 4
#: TTFT growth (ms) between ``max_tokens`` 1 and the typical length that buffering must exceed: above a loaded
#: host's timer and scheduling jitter.
PROXY_MIN_GROWTH_MS = 10.0
#: Buffering holds back at least this share of the generation time before the first token is delivered …
PROXY_MIN_HELD_FRACTION = 0.2
#: … and below this share nothing is held back.
PROXY_CLEAR_HELD_FRACTION = 0.1


def _rank(outcome: Outcome) -> int:
    """Which of two protocols' outcomes the report shows: a finding on either is the finding; an undecided or
    unmeasured one outranks a clear one (a clear needs both protocols clear)."""
    if isinstance(outcome, Finding):
        return 3
    if isinstance(outcome, Inconclusive):
        return 2
    return 1 if isinstance(outcome, NotTested) else 0


def check_proxy_buffering(ev: StreamEvidence, reference: Reference | None) -> Outcome:
    """Finding when TTFT grows with ``max_tokens`` (tokens held until a buffer fills or the stream ends) by at least
    :data:`PROXY_MIN_GROWTH_MS` and :data:`PROXY_MIN_HELD_FRACTION` of the generation time, with quickack on.

    The comparison runs over the protocol the client negotiated and, when that was HTTP/2, over HTTP/1.1 too
    (``quickack_http11``): a proxy may hold one protocol's stream and not the other's (nginx 1.22 with proxy
    buffering holds HTTP/1.1 over TLS in 16 KB bursts and forwards its HTTP/2 writes), and most clients speak only
    HTTP/1.1. A finding on either protocol is the finding.
    """
    if not ev.quickack_supported:
        return NotTested(PROXY_ID, "TCP_QUICKACK is not available on this client platform: Nagle cannot be excluded")
    broken = failures.too_many_failed(all_samples(ev))
    if broken:
        return NotTested(PROXY_ID, f"the target misbehaved during the streaming experiment: {broken}")
    main_protocol = next((s.http_version for s in ev.quickack if s.ok and s.http_version), None)
    main = _buffering(ev.quickack_short, ev.quickack, ev, reference, main_protocol, alternative=False)
    if not (ev.quickack_http11 or ev.quickack_short_http11):
        return main
    alt = _buffering(ev.quickack_short_http11, ev.quickack_http11, ev, reference, "HTTP/1.1", alternative=True)
    chosen, other = (alt, main) if _rank(alt) > _rank(main) else (main, alt)
    if not isinstance(chosen, NotTested):
        chosen.evidence["other_protocol"] = _summary(other)
    return chosen


def _summary(outcome: Outcome) -> dict[str, Any]:
    """The headline numbers of one protocol's buffering comparison (or why it did not measure)."""
    if isinstance(outcome, NotTested):
        return {"not_tested": outcome.reason}
    keys = ("protocol", "ttft_growth_ms", "held_fraction", "max_token_events_per_read")
    return {k: outcome.evidence.get(k) for k in keys} | {"outcome": type(outcome).__name__.lower()}


@dataclass(frozen=True, slots=True)
class _Growth:
    """TTFT (ms, medians) with ``max_tokens`` 1 and with the long length, the growth between them, the generation
    time after the short one's TTFT, the share of it held back, and the larger of the two groups' robust SDs."""

    short_p50: float
    long_p50: float
    growth: float
    generation: float
    fraction: float
    noise: float


def _growth(short: list[float], long: list[float], long_samples: tuple[RequestSample, ...]) -> _Growth:
    """How much TTFT grew with ``max_tokens``, against the generation time and the noise."""
    short_p50 = median(short)
    long_p50 = median(long)
    ends = [s.e2e_after_setup_ms for s in long_samples if s.ok and s.e2e_after_setup_ms is not None]
    end_p50 = median(ends)
    assert short_p50 is not None and long_p50 is not None
    growth = long_p50 - short_p50
    generation = (end_p50 - short_p50) if end_p50 is not None else 0.0
    fraction = growth / generation if generation > 0 else 0.0
    noise = max(robust_sd(short) or 0.0, robust_sd(long) or 0.0)
    return _Growth(short_p50, long_p50, growth, generation, fraction, noise)


def _buffering(
    short_samples: tuple[RequestSample, ...],
    long_samples: tuple[RequestSample, ...],
    ev: StreamEvidence,
    reference: Reference | None,
    protocol: str | None,
    *,
    alternative: bool,
) -> Finding | Inconclusive | NotTested | Clear:
    """The buffering comparison over one protocol (``alternative``: HTTP/1.1 next to a negotiated HTTP/2)."""
    over = f" over {protocol}" if protocol else ""
    short = ttfts(short_samples)
    long = ttfts(long_samples)
    if not short or not long:
        reason = failures.summarise((*short_samples, *long_samples)) or "no stream completed"
        return NotTested(PROXY_ID, f"the buffering comparison{over} could not measure: {reason}")
    g = _growth(short, long, long_samples)
    long_ok = [s for s in long_samples if s.ok]
    headers = {s.x_accel_buffering for s in (*long_samples, *([] if alternative else ev.reused)) if s.ok}
    evidence = _evidence(ev, protocol, g, long_ok, headers)
    unpiled = sum(1 for s in long_ok if late_without_pileup(s, g.growth))
    evidence["streams_first_token_alone"] = unpiled
    fill = segment_fill(short_samples, long_samples)
    if fill is not None:
        evidence["segment_fill"] = fill.to_dict()
    clock = ack_clock(long_samples)
    if clock is not None:
        evidence["ack_clock"] = clock.to_dict()
    cleared = _not_held(ev, over, g, fill, clock, unpiled == len(long_ok), evidence)
    if cleared is not None:
        return cleared
    return _held(ev, reference, over, g, long_ok, headers, evidence, alternative=alternative)


def _evidence(
    ev: StreamEvidence,
    protocol: str | None,
    g: _Growth,
    long_ok: list[RequestSample],
    headers: set[str | None],
) -> dict[str, Any]:
    """The comparison's numbers and the long streams' per-read picture."""
    bursty = sum(1 for s in long_ok if s.max_token_events_per_read >= BURST_EVENTS)
    bursts = sorted({b for s in long_ok for b in s.burst_bytes})
    return {
        "protocol": protocol,
        "max_tokens": ev.max_tokens,
        "ttft_max_tokens_1_ms_p50": round(g.short_p50, 3),
        f"ttft_max_tokens_{ev.max_tokens}_ms_p50": round(g.long_p50, 3),
        "ttft_growth_ms": round(g.growth, 3),
        "generation_ms": round(g.generation, 3),
        "held_fraction": round(g.fraction, 3),
        "noise_sd_ms": round(g.noise, 3),
        "bursty_streams": bursty,
        "streams": len(long_ok),
        "max_token_events_per_read": max((s.max_token_events_per_read for s in long_ok), default=0),
        "max_gap_ms": round(max((gap for s in long_ok for gap in s.itl_ms), default=0.0), 3),
        "burst_bytes": bursts[:16],
        "x_accel_buffering": sorted(h for h in headers if h is not None) or None,
    }


def _not_held(
    ev: StreamEvidence,
    over: str,
    g: _Growth,
    fill: SegmentFill | None,
    clock: AckClock | None,
    every_first_token_alone: bool,
    evidence: dict[str, Any],
) -> Clear | None:
    """Clear when the growth is Nagle's (its ACK clock, one segment's fill), too small, or no stream's first token
    was held; None otherwise."""
    growth = g.growth
    if clock is not None and clock.clocked and growth <= ACK_CLOCK_GROWTH_SPACINGS * clock.spacing_ms:
        return Clear(
            PROXY_ID,
            f"TTFT{over} grew {growth:.1f} ms from max_tokens 1 to {ev.max_tokens}, no more than the "
            f"{clock.spacing_ms:.1f} ms between the stream's partial TCP segments, which came a round trip apart: "
            "Nagle's algorithm waiting for ACKs, not a buffer (see stream-coalescing-nagle)",
            evidence,
        )
    if fill is not None and fill.one_segment and growth >= PROXY_MIN_GROWTH_MS:
        return Clear(
            PROXY_ID,
            f"TTFT{over} grew {growth:.1f} ms from max_tokens 1 to {ev.max_tokens}, while {fill.held_bytes:.0f} bytes "
            f"were written behind the first token: one TCP segment ({fill.mss} bytes), what Nagle's algorithm waits "
            "for, not a proxy's buffer (4 KB and more; see stream-coalescing-nagle)",
            evidence,
        )
    if growth < PROXY_MIN_GROWTH_MS or g.fraction < PROXY_CLEAR_HELD_FRACTION:
        return Clear(
            PROXY_ID,
            f"TTFT{over} is {g.short_p50:.1f} ms with max_tokens 1 and {g.long_p50:.1f} ms with {ev.max_tokens}: the "
            "first token is not held back for later ones",
            evidence,
        )
    if every_first_token_alone:
        return Clear(
            PROXY_ID,
            f"TTFT{over} grew {growth:.1f} ms from max_tokens 1 to {ev.max_tokens}, but every stream's first token "
            "arrived alone in its read although tokens came fast enough to pile up behind a held one: nothing was "
            "held back (the growth is the host's noise)",
            evidence,
        )
    return None


def _held(
    ev: StreamEvidence,
    reference: Reference | None,
    over: str,
    g: _Growth,
    long_ok: list[RequestSample],
    headers: set[str | None],
    evidence: dict[str, Any],
    *,
    alternative: bool,
) -> Finding | Inconclusive:
    """The first token was held for later ones: a finding when the growth is large enough and stands out of the
    noise, else inconclusive."""
    growth, fraction = g.growth, g.fraction
    # Every stream's first token arriving in one read with later ones shows the hold itself (measured with quickack
    # on, so not Nagle): the growth is then the mechanism, and a stalled request among two or three samples, which
    # inflates their spread, must not hide it.
    every_piled = all(s.first_read_token_events >= 2 for s in long_ok)
    evidence["every_stream_held"] = every_piled
    if fraction < PROXY_MIN_HELD_FRACTION or (not every_piled and growth < NOISE_Z * g.noise):
        return Inconclusive(
            PROXY_ID,
            f"TTFT{over} grows {growth:.1f} ms with max_tokens ({fraction:.0%} of the generation time, noise "
            f"{g.noise:.1f} ms): between the clear and the finding thresholds; more samples would settle it",
            evidence,
        )
    basis = (
        f"ms added to the TTFT of a request generating {ev.max_tokens} tokens{over}: tokens are held until the "
        "buffer in front of the stream fills or the response ends (measured with quickack on, so not Nagle)"
    )
    if alternative:
        basis += (
            "; clients that speak only HTTP/1.1 pay it (httpx and requests by default, and the SDKs built on them), "
            "HTTP/2 clients did not here"
        )
    rule = (
        f"TTFT{over} grew {growth:.1f} ms from max_tokens 1 to {ev.max_tokens} ({fraction:.0%} of the generation "
        "held back)"
    )
    if None in headers:
        rule += "; the response does not send 'X-Accel-Buffering: no'"
    bursty = sum(1 for s in long_ok if s.max_token_events_per_read >= BURST_EVENTS)
    return costed_finding(
        PROXY_ID,
        growth,
        reference,
        cost_basis=basis,
        evidence=evidence,
        rule=rule,
        confidence=Confidence.HIGH if bursty * 2 >= len(long_ok) else Confidence.MEDIUM,
    )
