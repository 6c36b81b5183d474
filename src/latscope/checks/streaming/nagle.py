"""``stream-coalescing-nagle``: the server's small writes wait for the client's ACK (see
:mod:`latscope.checks.streaming`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.checks.streaming.evidence import StreamEvidence, all_samples
from latscope.checks.streaming.measures import (
    ACK_CLOCK_GROWTH_SPACINGS,
    FILL_SEGMENTS_HIGH,
    NOISE_Z,
    AckClock,
    SegmentFill,
    ack_clock,
    control_noise_ms,
    late_without_pileup,
    per_read_summary,
    segment_fill,
    ttfts,
)
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Outcome

NAGLE_ID = "stream-coalescing-nagle"

#: Half of Linux's minimum delayed-ACK time (40 ms; Windows: 200 ms): a stream start held this much longer than with
#: quickack waited for an ACK, not for the scheduler.
NAGLE_MIN_HOLD_MS = 20.0
#: Nagle holds every stream start in delayed-ACK mode: more than this share of the samples must show the hold (a
#: strict majority: with the two samples of a quick run, one stream late from a busy host's stall is not enough).
NAGLE_HELD_SHARE = 0.5
#: Where a segment fills sooner than the delayed ACK comes, Nagle's hold ends with it: a stream start held at least
#: this share of the segment's fill time (when that is below :data:`NAGLE_MIN_HOLD_MS`) was held by Nagle.
FILL_HOLD_SHARE = 0.5


def _majority(held: int, streams: int) -> bool:
    """More than :data:`NAGLE_HELD_SHARE` of ``streams`` were held."""
    return streams > 0 and held > NAGLE_HELD_SHARE * streams


@dataclass(frozen=True, slots=True)
class _Hold:
    """The delayed-ACK condition that shows the hold best, against its control (ms).

    ``hold_ms``: the streams' median lateness over ``control_p50``; ``held``: late streams with tokens piled up
    behind their first; ``unpiled``: late streams whose first token came alone; ``min_hold_ms``: the lateness that
    counts (``mechanism_hold_ms`` raised to the controls' spread).
    """

    name: str
    samples: list[RequestSample]
    hold_ms: float
    held: int
    unpiled: int
    control_p50: float
    min_hold_ms: float
    mechanism_hold_ms: float

    @property
    def majority(self) -> bool:
        """More than :data:`NAGLE_HELD_SHARE` of the streams were held."""
        return _majority(self.held, len(self.samples))


def check_nagle(ev: StreamEvidence, reference: Reference | None) -> Outcome:
    """Finding when streams started in delayed-ACK mode (reused connections, or new ones forced into it) reach their
    first token at least :data:`NAGLE_MIN_HOLD_MS` later than with quickack on."""
    control = ttfts(ev.quickack)
    unmeasured = _unmeasured(ev, control)
    if unmeasured is not None:
        return unmeasured
    reused = [s for s in ev.reused if s.ok and s.reused]
    delayed = [s for s in ev.delayed_ack if s.ok]
    candidates = [(name, samples) for name, samples in (("reused", reused), ("delayed_ack", delayed)) if samples]
    if not candidates:
        return _no_delayed_ack_stream(ev, reused)
    control_p50 = median(control)
    assert control_p50 is not None
    # each condition against the control that pays what it pays: new connections against new connections
    fresh_control = median(ttfts(ev.quickack_fresh))
    controls = {"reused": control_p50, "delayed_ack": control_p50 if fresh_control is None else fresh_control}
    fill = segment_fill(ev.quickack_short, ev.quickack)
    min_hold, mechanism_hold, noise = _min_hold(ev, fill)
    h = _best_condition(candidates, controls, min_hold, mechanism_hold)
    evidence = _evidence(ev, h, fresh_control, bool(reused))
    _add_lateness(evidence, ev, h, candidates, controls, noise, fill)
    clock = ack_clock((*ev.quickack, *ev.quickack_http11))
    if clock is not None:
        evidence["ack_clock"] = clock.to_dict()
    ack_hold = h.hold_ms >= h.min_hold_ms and h.majority
    if not ack_hold:
        other = _other_release(ev, reference, h, fill, clock, evidence)
        if other is not None:
            return other
    if h.held == 0:
        return _nothing_held(h, fill, clock, evidence)
    return _held(ev, reference, h, bool(reused), evidence)


def _unmeasured(ev: StreamEvidence, control: list[float]) -> NotTested | None:
    """Why the streams cannot be compared with a quickack control, None when they can."""
    if not ev.quickack_supported:
        return NotTested(NAGLE_ID, "TCP_QUICKACK is not available on this client platform: no control stream")
    broken = failures.too_many_failed(all_samples(ev))
    if broken:
        return NotTested(NAGLE_ID, f"the target misbehaved during the streaming experiment: {broken}")
    if not control:
        reason = failures.summarise(ev.quickack) or "no stream completed"
        return NotTested(NAGLE_ID, f"the quickack control streams failed: {reason}")
    return None


def _no_delayed_ack_stream(ev: StreamEvidence, reused: list[RequestSample]) -> NotTested:
    """Why no stream started in delayed-ACK mode."""
    why = []
    if not reused:
        why.append("no connection was reused (the server closes them)")
    if not ev.delayed_ack_supported:
        why.append("this client cannot force delayed ACKs")
    else:
        why.append(failures.summarise(ev.delayed_ack) or "no delayed-ACK stream completed")
    return NotTested(NAGLE_ID, "no stream started in delayed-ACK mode: " + "; ".join(why))


def _min_hold(ev: StreamEvidence, fill: SegmentFill | None) -> tuple[float, float, float | None]:
    """``(min_hold, mechanism_hold, noise)`` (ms): the lateness that counts as a hold, the same before the
    controls' spread raised it, and that spread (None: too few controls)."""
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
    return min_hold, mechanism_hold, noise


def _best_condition(
    candidates: list[tuple[str, list[RequestSample]]],
    controls: dict[str, float],
    min_hold: float,
    mechanism_hold: float,
) -> _Hold:
    """Each condition's lateness against its control, and the condition that shows the hold best."""
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
    return _Hold(name, samples, hold, held, unpiled[name], controls[name], min_hold, mechanism_hold)


def _evidence(ev: StreamEvidence, h: _Hold, fresh_control: float | None, reused: bool) -> dict[str, Any]:
    """The chosen condition's hold, and the per-read picture of every condition."""
    name, samples, hold, control_p50 = h.name, h.samples, h.hold_ms, h.control_p50
    return {
        "condition": name,
        "ttft_held_ms_p50": round(control_p50 + hold, 3),
        "ttft_quickack_ms_p50": round(control_p50, 3),
        "control": "quickack_fresh" if name == "delayed_ack" and fresh_control is not None else "quickack",
        "hold_ms": round(hold, 3),
        "held_streams": h.held,
        "late_streams_without_pileup": h.unpiled,
        "streams": len(samples),
        "start_coalesced_streams": sum(1 for s in samples if s.first_read_token_events >= 2),
        "start_coalesced_streams_quickack": _quickack_coalesced(ev),
        "first_read_token_events": [s.first_read_token_events for s in samples],
        "reused_connections_seen": reused,
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


def _quickack_coalesced(ev: StreamEvidence) -> int:
    """Quickack streams that completed with their first token in one read with later ones."""
    return sum(1 for s in ev.quickack if s.ok and s.first_read_token_events >= 2)


def _add_lateness(
    evidence: dict[str, Any],
    ev: StreamEvidence,
    h: _Hold,
    candidates: list[tuple[str, list[RequestSample]]],
    controls: dict[str, float],
    noise: float | None,
    fill: SegmentFill | None,
) -> None:
    """Add the TTFT of new connections, the lateness that counts, each stream's lateness and the segment fill to
    ``evidence``."""
    fresh = ttfts(ev.fresh)
    if fresh:
        evidence["ttft_fresh_ms_p50"] = round(median(fresh) or 0.0, 3)
    evidence["min_hold_ms"] = round(h.min_hold_ms, 3)
    evidence["mechanism_min_hold_ms"] = round(h.mechanism_hold_ms, 3)
    if noise is not None:
        evidence["control_noise_sd_ms"] = round(noise, 3)
    evidence["late_ms"] = {
        name: [round(s.ttft_after_setup_ms - base, 3) for s in group if s.ttft_after_setup_ms is not None]
        for name, group, base in ((n, g, controls[n]) for n, g in candidates)
    }
    if fill is not None:
        evidence["segment_fill"] = fill.to_dict()


def _other_release(
    ev: StreamEvidence,
    reference: Reference | None,
    h: _Hold,
    fill: SegmentFill | None,
    clock: AckClock | None,
    evidence: dict[str, Any],
) -> Finding | None:
    """Nagle found by a release other than the delayed ACK (a segment filled, or the ACK clock), None when neither
    shows."""
    if fill is not None and fill.one_segment:
        quick = [s for s in ev.quickack if s.ok]
        if _majority(sum(1 for s in quick if s.first_read_token_events >= 2), len(quick)):
            return _segment_fill_finding(ev, reference, h.name, h.samples, fill, evidence)
    # a first token held longer than the clock's spacing waited for a buffer, whose bursts the clock then paces
    buffered = fill is not None and fill.growth_ms > ACK_CLOCK_GROWTH_SPACINGS * clock.spacing_ms if clock else False
    if clock is not None and clock.clocked and not buffered:
        return _ack_clock_finding(reference, clock, evidence)
    return None


def _nothing_held(h: _Hold, fill: SegmentFill | None, clock: AckClock | None, evidence: dict[str, Any]) -> Outcome:
    """No stream in delayed-ACK mode was held: clear, unless the ACK clock was neither free nor a round trip."""
    if clock is not None and not clock.free:
        return Inconclusive(
            NAGLE_ID,
            f"nothing waited for a delayed ACK, but the streams' partial segments came {clock.spacing_ms:.1f} ms "
            f"apart, {clock.spacing_ms / clock.rtt_ms:.0%} of the {clock.rtt_ms:.1f} ms round trip: neither one "
            f"token interval ({clock.interval_ms:.1f} ms) nor a round trip apart; more samples would settle it",
            evidence,
        )
    alone = ""
    if h.unpiled:
        alone = (
            f"; {h.unpiled} started late with its first token alone in its read, so it was not held after "
            "the server wrote (a stall elsewhere)"
        )
    spread = ""
    if h.min_hold_ms > h.mechanism_hold_ms:
        spread = f" (none beyond {h.min_hold_ms:.1f} ms, three times the quickack controls' spread"
        if fill is not None and h.mechanism_hold_ms < NAGLE_MIN_HOLD_MS:
            spread += f"; a hold here would last no longer than a segment takes to fill, {fill.fill_time_ms:.1f} ms"
        spread += ")"

    return Clear(
        NAGLE_ID,
        f"streams in delayed-ACK mode reached their first token {h.hold_ms:.1f} ms from the quickack control's "
        f"{h.control_p50:.1f} ms: nothing waited for an ACK{spread}{alone}",
        evidence,
    )


def _held(ev: StreamEvidence, reference: Reference | None, h: _Hold, reused: bool, evidence: dict[str, Any]) -> Outcome:
    """Streams in delayed-ACK mode were held: a finding when a majority was held long enough, else inconclusive."""
    name, samples, hold, held, min_hold = h.name, h.samples, h.hold_ms, h.held, h.min_hold_ms
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
    coalesced = sum(1 for s in samples if s.first_read_token_events >= 2)
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
        confidence=Confidence.HIGH
        if coalesced * 2 >= len(samples) and _quickack_coalesced(ev) == 0
        else Confidence.MEDIUM,
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
    of data to be written (see :mod:`latscope.checks.streaming`)."""
    short = median(ttfts(ev.quickack_short))
    start = median(ttfts(samples))
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
    """Nagle found by its clock: the partial segments came a round trip apart (see :mod:`latscope.checks.streaming`)."""
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
