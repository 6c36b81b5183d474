"""Streaming checks: ``stream-coalescing-nagle`` and ``stream-proxy-buffering``.

Both hold tokens back between the engine and the client, and both show as several events landing in one socket
read. They are told apart by their mechanisms (reference/network-timing.md):

- Nagle's algorithm (TCP_NODELAY off on the server's socket) holds a small write while an earlier one is unacknowledged,
  so it appears only when the client delays its ACK: on reused keep-alive connections at stream start (the ACK state
  a request/response exchange leaves), for about the delayed-ACK time (40 ms minimum on Linux), and it disappears
  when the client ACKs at once (TCP_QUICKACK). The control is the same request with quickack on.
- A buffering proxy holds bytes until its buffer fills (4/8/16 KB) or the response ends, whatever the ACKs do: the
  first token waits for the buffer, so TTFT grows with the number of tokens requested. The control is the same
  prompt with ``max_tokens`` 1, and both are measured with quickack on so Nagle cannot contribute.

On a real network the two meet. Nagle also releases a held write once a whole segment's worth of data waits (one MSS,
1448 bytes on an Ethernet path), and when the round trip is longer than the server takes to write that much, the
segment fills first: the hold no longer depends on the ACK (quickack does not remove it) and TTFT grows with
``max_tokens``, as behind a buffer. What tells them apart is how much was held: Nagle holds about one segment
(:func:`segment_fill`, the segment size from TCP_INFO), a proxy's buffer is several (4 KB or more). On loopback a
segment is 64 KB and the ACK always comes first.

Between the two, Nagle leaves a third mark that needs no control: it lets one partial segment be unacknowledged at a
time, so when the server writes several tokens per round trip, the partial segments reach the client a round trip
apart, each carrying the tokens written meanwhile (:func:`ack_clock`). A stream written as it is generated
delivers them one token interval apart. A buffer whose fill time happens to equal the round trip looks the same; the
buffering comparison (TTFT against ``max_tokens``) still tells a buffer larger than that apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.evidence import Reference, RequestSample, StreamEvidence
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, robust_sd
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Outcome

NAGLE_ID = "stream-coalescing-nagle"
PROXY_ID = "stream-proxy-buffering"

#: Half of Linux's minimum delayed-ACK time (40 ms; Windows: 200 ms): a stream start held this much longer than with
#: quickack waited for an ACK, not for the scheduler.
NAGLE_MIN_HOLD_MS = 20.0
#: Nagle holds every stream start in delayed-ACK mode: more than this share of the samples must show the hold (a
#: strict majority: with the two samples of a quick run, one stream late from a busy host's stall is not enough).
NAGLE_HELD_SHARE = 0.5
#: A first token held back (by Nagle waiting for an ACK, or by a buffer) for this many of the server's token
#: intervals has the tokens generated meanwhile waiting behind it: they arrive in the same read. A stream that
#: started that late with its first token alone in its read was not held; it was delayed before the server wrote
#: (a stall of a busy host, the scheduler), which is not what these checks name.
PILEUP_INTERVALS = 2.0
#: A read completing this many token events or more is a burst (one event per read is an unbuffered stream).
BURST_EVENTS = 4
#: TTFT growth (ms) between ``max_tokens`` 1 and the typical length that buffering must exceed: above a loaded
#: host's timer and scheduling jitter.
PROXY_MIN_GROWTH_MS = 10.0
#: Buffering holds back at least this share of the generation time before the first token is delivered …
PROXY_MIN_HELD_FRACTION = 0.2
#: … and below this share nothing is held back.
PROXY_CLEAR_HELD_FRACTION = 0.1
#: The growth must stand this many noise standard deviations above zero.
NOISE_Z = 3.0
#: A first token held back with between this many TCP segments' worth of data … (Nagle releases a write once one
#: segment's worth waits; a proxy's buffer, 4 KB and more, is at least 2.8 segments of 1448 bytes)
FILL_SEGMENTS_LOW = 0.5
#: … and this many waited for a segment to fill.
FILL_SEGMENTS_HIGH = 1.6
#: A segment fill must hold the first token for at least this many of the server's token intervals to count.
FILL_MIN_INTERVALS = 2.0
#: Where a segment fills sooner than the delayed ACK comes, Nagle's hold ends with it: a stream start held at least
#: this share of the segment's fill time (when that is below :data:`NAGLE_MIN_HOLD_MS`) was held by Nagle.
FILL_HOLD_SHARE = 0.5
#: Nagle's clock: partial-segment reads spaced this share of the round trip or more (median) waited for ACKs. Not a
#: whole round trip: over TLS a read is what the records it completed decrypt to, not a wire segment, and a second
#: partial read per round trip is common (through nginx with ``tcp_nodelay off`` over TLS at a 40 ms round trip the
#: median came at 62–73 % of it, every run; a run of full-segment reads in between shortens a gap too). A stream
#: written as it is generated reads one token interval apart, at most a third of the round trip where the clock is
#: read at all (:data:`ACK_CLOCK_MIN_TOKENS_PER_RTT`) …
ACK_CLOCK_SHARE = 0.5
#: … and spaced at most this share went out as written.
ACK_CLOCK_CLEAR_SHARE = 0.4
#: The clock shows only where the server writes at least this many tokens per round trip (with fewer, each write
#: finds the previous one acknowledged and goes out at once: Nagle holds nothing).
ACK_CLOCK_MIN_TOKENS_PER_RTT = 3.0
#: Partial-segment gaps, over all the streams, needed to judge the clock.
ACK_CLOCK_MIN_GAPS = 6
#: A TTFT growth with ``max_tokens`` up to this many of the clock's spacings is Nagle's hold, not a buffer's.
ACK_CLOCK_GROWTH_SPACINGS = 1.25


@dataclass(frozen=True, slots=True)
class AckClock:
    """How the partial segments of some streams were paced, against the round trip (see the module docstring).

    ``rtt_ms``: the connection's round trip (TCP_INFO, median over the streams); ``interval_ms``: the server's time
    per token (median of the streams' mean inter-token gaps); ``spacing_ms``: the median gap between partial-segment
    reads; ``gaps``: how many gaps that median is over; ``first_hold_ms``: how long the first token was held at
    least (median over the streams of the tokens its read carried after it × ``interval_ms``); ``token_hold_ms``:
    the same lower bound averaged over every token.
    """

    rtt_ms: float
    interval_ms: float
    spacing_ms: float
    gaps: int
    first_hold_ms: float
    token_hold_ms: float

    @property
    def clocked(self) -> bool:
        """The partial segments came about a round trip apart (at least :data:`ACK_CLOCK_SHARE` of it): Nagle waited
        for each ACK."""
        return self.spacing_ms >= ACK_CLOCK_SHARE * self.rtt_ms

    @property
    def free(self) -> bool:
        """The partial segments came much faster than the round trip: nothing waited for an ACK."""
        return self.spacing_ms <= ACK_CLOCK_CLEAR_SHARE * self.rtt_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "rtt_ms": round(self.rtt_ms, 3),
            "token_interval_ms": round(self.interval_ms, 3),
            "partial_segment_spacing_ms": round(self.spacing_ms, 3),
            "spacing_rtt_share": round(self.spacing_ms / self.rtt_ms, 3),
            "gaps": self.gaps,
            "first_token_hold_ms_at_least": round(self.first_hold_ms, 3),
            "token_hold_ms_at_least": round(self.token_hold_ms, 3),
        }


def ack_clock(samples: tuple[RequestSample, ...] | list[RequestSample]) -> AckClock | None:
    """The pacing of ``samples``' partial segments (:class:`AckClock`), or None where it cannot show: no round
    trip or token interval measured, fewer than :data:`ACK_CLOCK_MIN_TOKENS_PER_RTT` tokens per round trip (always
    on loopback), or fewer than :data:`ACK_CLOCK_MIN_GAPS` gaps."""
    done = [s for s in samples if s.ok and s.itl_ms]
    rtt = median([s.rtt_ms for s in done if s.rtt_ms is not None])
    interval = median([sum(s.itl_ms) / len(s.itl_ms) for s in done])
    gaps = [g for s in done for g in s.partial_read_gaps_ms]
    if rtt is None or not interval or rtt < ACK_CLOCK_MIN_TOKENS_PER_RTT * interval or len(gaps) < ACK_CLOCK_MIN_GAPS:
        return None
    spacing = median(gaps)
    first = median([max(0, s.first_read_token_events - 1) * interval for s in done])
    events = sum(sum(s.token_read_events) for s in done)
    # a read of k tokens held its first k-1 intervals, its last none: (k - 1) / 2 intervals per token on average
    held = sum(k * (k - 1) / 2 for s in done for k in s.token_read_events)
    assert spacing is not None and first is not None
    return AckClock(rtt, interval, spacing, len(gaps), first, held / events * interval if events else 0.0)


@dataclass(frozen=True, slots=True)
class SegmentFill:
    """How much a stream's first token was held back, in TCP segments.

    ``growth_ms``: the fastest TTFT with the long stream's ``max_tokens`` minus the fastest with ``max_tokens`` 1
    (quickack on both);
    ``interval_ms``: the server's time per token (the long streams' mean inter-token gap); ``event_bytes``: the mean
    body bytes per stream event; ``held_bytes``: what was written while the first token waited
    (growth ÷ interval × event bytes); ``mss``: the server's segment size, bytes
    (:attr:`~latscope.timeline.model.TcpInfo.segment_bytes`).
    """

    growth_ms: float
    interval_ms: float
    event_bytes: float
    held_bytes: float
    mss: int

    @property
    def segments(self) -> float:
        """The held bytes in segments."""
        return self.held_bytes / self.mss

    @property
    def fill_time_ms(self) -> float:
        """How long the server takes to write one segment's worth of events: the longest Nagle can hold a stream's
        start on this path, however late the ACK comes."""
        return self.mss / self.event_bytes * self.interval_ms

    @property
    def one_segment(self) -> bool:
        """The hold is about one segment's worth: what Nagle waits for, not a proxy's buffer."""
        return FILL_SEGMENTS_LOW <= self.segments <= FILL_SEGMENTS_HIGH and (
            self.growth_ms >= FILL_MIN_INTERVALS * self.interval_ms
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttft_growth_ms": round(self.growth_ms, 3),
            "token_interval_ms": round(self.interval_ms, 3),
            "event_bytes": round(self.event_bytes, 1),
            "held_bytes": round(self.held_bytes, 1),
            "segment_bytes": self.mss,
            "held_segments": round(self.segments, 2),
        }


def segment_fill(
    short_samples: tuple[RequestSample, ...], long_samples: tuple[RequestSample, ...]
) -> SegmentFill | None:
    """The first token's hold in TCP segments (see :class:`SegmentFill`), or None without the numbers (no segment
    size from TCP_INFO, streams too short for a token interval).

    The hold is the fastest long stream's TTFT less the fastest short one's: Nagle and a buffer hold every stream's
    start, so the fastest shows the hold too, while a stream that also stalled (a busy host, a late ACK) would make
    a median of the two or three streams of a quick run count more than the segment Nagle waits for."""
    short = min(_ttfts(short_samples), default=None)
    done = [s for s in long_samples if s.ok and s.events and s.itl_ms]
    long = min(_ttfts(done), default=None)
    interval = median([sum(s.itl_ms) / len(s.itl_ms) for s in done])
    event_bytes = median([s.body_bytes / s.events for s in done])
    mss = median([float(s.segment_bytes) for s in done if s.segment_bytes])
    if short is None or long is None or not interval or not event_bytes or not mss:
        return None
    growth = long - short
    return SegmentFill(growth, interval, event_bytes, max(0.0, growth) / interval * event_bytes, int(mss))


def _ttfts(samples: tuple[RequestSample, ...] | list[RequestSample]) -> list[float]:
    return [s.ttft_after_setup_ms for s in samples if s.ok and s.ttft_after_setup_ms is not None]


def per_read_summary(samples: tuple[RequestSample, ...] | list[RequestSample]) -> dict[str, Any]:
    """The per-read picture of some streams: how many, median TTFT, most token events one read carried, the
    largest gap between token events (ms), and the sizes of the reads that carried several events (bytes)."""
    done = [s for s in samples if s.ok]
    ttft = median(_ttfts(done))
    return {
        "streams": len(done),
        "ttft_ms_p50": None if ttft is None else round(ttft, 3),
        "max_token_events_per_read": max((s.max_token_events_per_read for s in done), default=0),
        "max_gap_ms": round(max((g for s in done for g in s.itl_ms), default=0.0), 3),
        "burst_bytes": sorted({b for s in done for b in s.burst_bytes})[:8],
    }


def late_without_pileup(sample: RequestSample, late_ms: float) -> bool:
    """True when ``sample`` reached its first token ``late_ms`` late with that token alone in its read, although
    at its own cadence :data:`PILEUP_INTERVALS` or more tokens would have piled up behind a held first token: the
    lateness was not a hold of written data. False when the stream's first read carried several tokens, or its
    cadence is unknown or too slow to tell.

    The cadence is the mean inter-token gap, the pace the server generated at: across a network path a fast stream's
    later tokens arrive several to a read, and their gaps of 0 would make the median say nothing."""
    if sample.first_read_token_events >= 2 or not sample.itl_ms:
        return False
    cadence = sum(sample.itl_ms) / len(sample.itl_ms)
    return cadence > 0.0 and late_ms >= PILEUP_INTERVALS * cadence


def control_noise_ms(*groups: tuple[RequestSample, ...]) -> float | None:
    """The spread of the control streams' TTFT (ms): a robust SD of each stream's distance from its own group's
    median, pooled over ``groups`` (each group pays its own setup, so their medians differ). None below 3 streams."""
    deviations: list[float] = []
    for group in groups:
        ttfts = _ttfts(group)
        mid = median(ttfts)
        if mid is not None and len(ttfts) >= 2:
            deviations.extend(t - mid for t in ttfts)
    if len(deviations) < 3:
        return None
    return robust_sd(deviations)


def _all_samples(ev: StreamEvidence) -> tuple[RequestSample, ...]:
    return (
        *ev.fresh,
        *ev.reused,
        *ev.delayed_ack,
        *ev.quickack,
        *ev.quickack_short,
        *ev.quickack_fresh,
        *ev.quickack_http11,
        *ev.quickack_short_http11,
    )


def _majority(held: int, streams: int) -> bool:
    """More than :data:`NAGLE_HELD_SHARE` of ``streams`` were held."""
    return streams > 0 and held > NAGLE_HELD_SHARE * streams


def check_nagle(ev: StreamEvidence, reference: Reference | None) -> Outcome:
    """Finding when streams started in delayed-ACK mode (reused connections, or new ones forced into it) reach their
    first token at least :data:`NAGLE_MIN_HOLD_MS` later than with quickack on."""
    control = _ttfts(ev.quickack)
    if not ev.quickack_supported:
        return NotTested(NAGLE_ID, "TCP_QUICKACK is not available on this client platform: no control stream")
    broken = failures.too_many_failed(_all_samples(ev))
    if broken:
        return NotTested(NAGLE_ID, f"the target misbehaved during the streaming experiment: {broken}")
    if not control:
        reason = failures.summarise(ev.quickack) or "no stream completed"
        return NotTested(NAGLE_ID, f"the quickack control streams failed: {reason}")
    reused = [s for s in ev.reused if s.ok and s.reused]
    delayed = [s for s in ev.delayed_ack if s.ok]
    candidates = [(name, samples) for name, samples in (("reused", reused), ("delayed_ack", delayed)) if samples]
    if not candidates:
        why = []
        if not reused:
            why.append("no connection was reused (the server closes them)")
        if not ev.delayed_ack_supported:
            why.append("this client cannot force delayed ACKs")
        else:
            why.append(failures.summarise(ev.delayed_ack) or "no delayed-ACK stream completed")
        return NotTested(NAGLE_ID, "no stream started in delayed-ACK mode: " + "; ".join(why))
    control_p50 = median(control)
    assert control_p50 is not None
    # each condition against the control that pays what it pays: new connections against new connections
    fresh_control = median(_ttfts(ev.quickack_fresh))
    controls = {"reused": control_p50, "delayed_ack": control_p50 if fresh_control is None else fresh_control}
    fill = segment_fill(ev.quickack_short, ev.quickack)
    # the longest hold to expect: the delayed ACK, or on a real network the time a segment takes to fill if shorter;
    # not where the quickack streams were held for more than a segment (a buffer: their token gaps are not the
    # server's, and neither is the fill time they give)
    min_hold = NAGLE_MIN_HOLD_MS
    if fill is not None and fill.segments <= FILL_SEGMENTS_HIGH:
        min_hold = min(NAGLE_MIN_HOLD_MS, FILL_HOLD_SHARE * fill.fill_time_ms)
    # a stream is late only beyond the controls' own spread: across a network path the server's and the link's
    # jitter can exceed a short fill time, and a lateness inside it is no evidence of a hold
    noise = control_noise_ms(ev.quickack, ev.quickack_fresh)
    mechanism_hold = min_hold
    if noise is not None:
        min_hold = max(min_hold, NOISE_Z * noise)
    measured: list[tuple[str, list[RequestSample], float, int]] = []
    unpiled: dict[str, int] = {}
    for name, samples in candidates:
        base = controls[name]
        timed = [(s, s.ttft_after_setup_ms - base) for s in samples if s.ttft_after_setup_ms is not None]
        p50 = median([late for _, late in timed])
        assert p50 is not None
        late = [(s, v) for s, v in timed if v >= min_hold]
        # late streams whose first token came alone, at a cadence that would have piled tokens up behind a hold
        unpiled[name] = sum(1 for s, v in late if late_without_pileup(s, v))
        measured.append((name, samples, p50, len(late) - unpiled[name]))
    # the condition that shows the hold best; reused connections first (what users see) when both show it
    name, samples, hold, held = max(measured, key=lambda m: (_majority(m[3], len(m[1])), m[2]))
    control_p50 = controls[name]
    coalesced = sum(1 for s in samples if s.first_read_token_events >= 2)
    control_coalesced = sum(1 for s in ev.quickack if s.ok and s.first_read_token_events >= 2)
    evidence: dict[str, Any] = {
        "condition": name,
        "ttft_held_ms_p50": round(control_p50 + hold, 3),
        "ttft_quickack_ms_p50": round(control_p50, 3),
        "control": "quickack_fresh" if name == "delayed_ack" and fresh_control is not None else "quickack",
        "hold_ms": round(hold, 3),
        "held_streams": held,
        "late_streams_without_pileup": unpiled[name],
        "streams": len(samples),
        "start_coalesced_streams": coalesced,
        "start_coalesced_streams_quickack": control_coalesced,
        "first_read_token_events": [s.first_read_token_events for s in samples],
        "reused_connections_seen": bool(reused),
        "per_read": {
            name: per_read_summary(group)
            for name, group in (
                ("fresh", ev.fresh),
                ("reused", ev.reused),
                ("delayed_ack", ev.delayed_ack),
                ("quickack", ev.quickack),
                ("quickack_fresh", ev.quickack_fresh),
            )
            if group
        },
    }
    fresh = _ttfts(ev.fresh)
    if fresh:
        evidence["ttft_fresh_ms_p50"] = round(median(fresh) or 0.0, 3)
    evidence["min_hold_ms"] = round(min_hold, 3)
    evidence["mechanism_min_hold_ms"] = round(mechanism_hold, 3)
    if noise is not None:
        evidence["control_noise_sd_ms"] = round(noise, 3)
    evidence["late_ms"] = {
        name: [round(s.ttft_after_setup_ms - base, 3) for s in group if s.ttft_after_setup_ms is not None]
        for name, group, base in ((n, g, controls[n]) for n, g in candidates)
    }
    if fill is not None:
        evidence["segment_fill"] = fill.to_dict()
    clock = ack_clock((*ev.quickack, *ev.quickack_http11))
    if clock is not None:
        evidence["ack_clock"] = clock.to_dict()
    ack_hold = hold >= min_hold and _majority(held, len(samples))
    if not ack_hold and fill is not None and fill.one_segment:
        quick = [s for s in ev.quickack if s.ok]
        if _majority(sum(1 for s in quick if s.first_read_token_events >= 2), len(quick)):
            return _segment_fill_finding(ev, reference, name, samples, fill, evidence)
    # a first token held longer than the clock's spacing waited for a buffer, whose bursts the clock then paces
    buffered = fill is not None and fill.growth_ms > ACK_CLOCK_GROWTH_SPACINGS * clock.spacing_ms if clock else False
    if not ack_hold and clock is not None and clock.clocked and not buffered:
        return _ack_clock_finding(reference, clock, evidence)
    if held == 0 and clock is not None and not clock.free:
        return Inconclusive(
            NAGLE_ID,
            f"nothing waited for a delayed ACK, but the streams' partial segments came {clock.spacing_ms:.1f} ms "
            f"apart, {clock.spacing_ms / clock.rtt_ms:.0%} of the {clock.rtt_ms:.1f} ms round trip: neither one "
            f"token interval ({clock.interval_ms:.1f} ms) nor a round trip apart; more samples would settle it",
            evidence,
        )
    if held == 0:
        alone = ""
        if unpiled[name]:
            alone = (
                f"; {unpiled[name]} started late with its first token alone in its read, so it was not held after "
                "the server wrote (a stall elsewhere)"
            )
        spread = ""
        if min_hold > mechanism_hold:
            spread = f" (none beyond {min_hold:.1f} ms, three times the quickack controls' spread"
            if fill is not None and mechanism_hold < NAGLE_MIN_HOLD_MS:
                spread += f"; a hold here would last no longer than a segment takes to fill, {fill.fill_time_ms:.1f} ms"
            spread += ")"

        return Clear(
            NAGLE_ID,
            f"streams in delayed-ACK mode reached their first token {hold:.1f} ms from the quickack control's "
            f"{control_p50:.1f} ms: nothing waited for an ACK{spread}{alone}",
            evidence,
        )
    if hold < min_hold or not _majority(held, len(samples)):
        return Inconclusive(
            NAGLE_ID,
            f"{held} of {len(samples)} delayed-ACK streams started ≥ {min_hold:.1f} ms late (median hold "
            f"{hold:.1f} ms): more samples would settle it",
            evidence,
        )
    basis = (
        "ms added to TTFT at the start of a stream on a connection in delayed-ACK mode (every reused keep-alive "
        "connection): the server's small writes wait for the client's delayed ACK"
    )
    if name == "delayed_ack" and not reused:
        basis += "; masked today because connections are not reused, it appears as soon as keep-alive works"
    return costed_finding(
        NAGLE_ID,
        hold,
        reference,
        cost_basis=basis,
        evidence=evidence,
        rule=(
            f"{held} of {len(samples)} streams in delayed-ACK mode started ≥ {min_hold:.1f} ms later than "
            "with quickack on (Nagle holding small writes until the ACK)"
        ),
        confidence=Confidence.HIGH if coalesced * 2 >= len(samples) and control_coalesced == 0 else Confidence.MEDIUM,
    )


def _segment_fill_finding(
    ev: StreamEvidence,
    reference: Reference | None,
    name: str,
    samples: list[RequestSample],
    fill: SegmentFill,
    evidence: dict[str, Any],
) -> Finding:
    """Nagle found by its other release: the first token waited, with quickack on, for about one segment's worth
    of data to be written (see the module docstring)."""
    short = median(_ttfts(ev.quickack_short))
    start = median(_ttfts(samples))
    assert short is not None and start is not None
    cost = max(fill.growth_ms, start - short)  # what a stream in delayed-ACK mode (every reused connection) waits
    rtt = median([s.rtt_ms for s in (*ev.quickack, *samples) if s.ok and s.rtt_ms is not None])
    away = "" if rtt is None else f" on a path whose round trip ({rtt:.1f} ms) outlasts that"
    evidence["condition"] = name
    return costed_finding(
        NAGLE_ID,
        cost,
        reference,
        cost_basis=(
            f"ms added to TTFT at the start of a stream (delayed-ACK mode, every reused keep-alive connection: "
            f"{start - short:.1f} ms; with quickack on: {fill.growth_ms:.1f} ms): the server's small writes wait "
            "until a whole TCP segment's worth is written"
        ),
        evidence=evidence,
        rule=(
            f"with quickack on, the first token waited {fill.growth_ms:.1f} ms for {fill.held_bytes:.0f} bytes to "
            f"be written behind it, {fill.segments:.2f} TCP segments of {fill.mss} bytes (Nagle's algorithm "
            f"releasing small writes once a segment is full){away}"
        ),
        confidence=Confidence.HIGH if rtt is not None else Confidence.MEDIUM,
    )


def _ack_clock_finding(reference: Reference | None, clock: AckClock, evidence: dict[str, Any]) -> Finding:
    """Nagle found by its clock: the partial segments came a round trip apart (see the module docstring)."""
    first = clock.first_hold_ms
    cost = first if first > 0 else clock.token_hold_ms
    return costed_finding(
        NAGLE_ID,
        cost,
        reference,
        cost_basis=(
            f"ms added to TTFT at least: the first token reached the client with {first / clock.interval_ms:.0f} "
            f"token(s) written after it ({clock.interval_ms:.1f} ms apart); every token waits "
            f"{clock.token_hold_ms:.1f} ms on average, up to a round trip ({clock.rtt_ms:.1f} ms), for the ACK of "
            "the previous partial segment"
        ),
        evidence=evidence,
        rule=(
            f"with quickack on, the streams' partial TCP segments came {clock.spacing_ms:.1f} ms apart (median of "
            f"{clock.gaps}), {clock.spacing_ms / clock.rtt_ms:.0%} of the {clock.rtt_ms:.1f} ms round trip, while "
            f"the server wrote a token every {clock.interval_ms:.1f} ms (Nagle's algorithm sending one partial "
            "segment per ACK)"
        ),
        confidence=Confidence.HIGH if clock.first_hold_ms > 0 else Confidence.MEDIUM,
    )


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
    broken = failures.too_many_failed(_all_samples(ev))
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
    short = _ttfts(short_samples)
    long = _ttfts(long_samples)
    if not short or not long:
        reason = failures.summarise((*short_samples, *long_samples)) or "no stream completed"
        return NotTested(PROXY_ID, f"the buffering comparison{over} could not measure: {reason}")
    short_p50 = median(short)
    long_p50 = median(long)
    ends = [s.e2e_after_setup_ms for s in long_samples if s.ok and s.e2e_after_setup_ms is not None]
    end_p50 = median(ends)
    assert short_p50 is not None and long_p50 is not None
    growth = long_p50 - short_p50
    generation = (end_p50 - short_p50) if end_p50 is not None else 0.0
    fraction = growth / generation if generation > 0 else 0.0
    noise = max(robust_sd(short) or 0.0, robust_sd(long) or 0.0)
    long_ok = [s for s in long_samples if s.ok]
    bursty = sum(1 for s in long_ok if s.max_token_events_per_read >= BURST_EVENTS)
    bursts = sorted({b for s in long_ok for b in s.burst_bytes})
    headers = {s.x_accel_buffering for s in (*long_samples, *([] if alternative else ev.reused)) if s.ok}
    evidence: dict[str, Any] = {
        "protocol": protocol,
        "max_tokens": ev.max_tokens,
        "ttft_max_tokens_1_ms_p50": round(short_p50, 3),
        f"ttft_max_tokens_{ev.max_tokens}_ms_p50": round(long_p50, 3),
        "ttft_growth_ms": round(growth, 3),
        "generation_ms": round(generation, 3),
        "held_fraction": round(fraction, 3),
        "noise_sd_ms": round(noise, 3),
        "bursty_streams": bursty,
        "streams": len(long_ok),
        "max_token_events_per_read": max((s.max_token_events_per_read for s in long_ok), default=0),
        "max_gap_ms": round(max((g for s in long_ok for g in s.itl_ms), default=0.0), 3),
        "burst_bytes": bursts[:16],
        "x_accel_buffering": sorted(h for h in headers if h is not None) or None,
    }
    unpiled = sum(1 for s in long_ok if late_without_pileup(s, growth))
    evidence["streams_first_token_alone"] = unpiled
    fill = segment_fill(short_samples, long_samples)
    if fill is not None:
        evidence["segment_fill"] = fill.to_dict()
    clock = ack_clock(long_samples)
    if clock is not None:
        evidence["ack_clock"] = clock.to_dict()
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
    if growth < PROXY_MIN_GROWTH_MS or fraction < PROXY_CLEAR_HELD_FRACTION:
        return Clear(
            PROXY_ID,
            f"TTFT{over} is {short_p50:.1f} ms with max_tokens 1 and {long_p50:.1f} ms with {ev.max_tokens}: the "
            "first token is not held back for later ones",
            evidence,
        )
    if unpiled == len(long_ok):
        return Clear(
            PROXY_ID,
            f"TTFT{over} grew {growth:.1f} ms from max_tokens 1 to {ev.max_tokens}, but every stream's first token "
            "arrived alone in its read although tokens came fast enough to pile up behind a held one: nothing was "
            "held back (the growth is the host's noise)",
            evidence,
        )
    # Every stream's first token arriving in one read with later ones shows the hold itself (measured with quickack
    # on, so not Nagle): the growth is then the mechanism, and a stalled request among two or three samples, which
    # inflates their spread, must not hide it.
    every_piled = all(s.first_read_token_events >= 2 for s in long_ok)
    evidence["every_stream_held"] = every_piled
    if fraction < PROXY_MIN_HELD_FRACTION or (not every_piled and growth < NOISE_Z * noise):
        return Inconclusive(
            PROXY_ID,
            f"TTFT{over} grows {growth:.1f} ms with max_tokens ({fraction:.0%} of the generation time, noise "
            f"{noise:.1f} ms): between the clear and the finding thresholds; more samples would settle it",
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
    return costed_finding(
        PROXY_ID,
        growth,
        reference,
        cost_basis=basis,
        evidence=evidence,
        rule=rule,
        confidence=Confidence.HIGH if bursty * 2 >= len(long_ok) else Confidence.MEDIUM,
    )
