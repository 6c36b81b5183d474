"""What the streaming checks measure of a group of streams: the ACK clock of their partial segments, how many
segments held the first token back, and the per-read picture (see :mod:`latscope.checks.streaming`). Durations in ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks.samples import RequestSample
from latscope.checks.stats import median, robust_sd

#: A first token held back (by Nagle waiting for an ACK, or by a buffer) for this many of the server's token
#: intervals has the tokens generated meanwhile waiting behind it: they arrive in the same read. A stream that
#: started that late with its first token alone in its read was not held; it was delayed before the server wrote
#: (a stall of a busy host, the scheduler), which is not what these checks name.
PILEUP_INTERVALS = 2.0
#: The growth must stand this many noise standard deviations above zero.
NOISE_Z = 3.0
#: A first token held back with between this many TCP segments' worth of data … (Nagle releases a write once one
#: segment's worth waits; a proxy's buffer, 4 KB and more, is at least 2.8 segments of 1448 bytes)
FILL_SEGMENTS_LOW = 0.5
#: … and this many waited for a segment to fill.
FILL_SEGMENTS_HIGH = 1.6
#: A segment fill must hold the first token for at least this many of the server's token intervals to count.
FILL_MIN_INTERVALS = 2.0
#: Nagle's clock: partial-segment reads spaced this share of the round trip or more (median) waited for ACKs. Not a
#: whole round trip: over TLS a read is what the records it completed decrypt to, not a wire segment, and a second
#: partial read per round trip is common (through nginx with ``tcp_nodelay off`` over TLS the median spacing is about
#: two thirds of the round trip; a run of full-segment reads in between shortens a gap too). A stream
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
    """How the partial segments of some streams were paced, against the round trip (see
    :mod:`latscope.checks.streaming`).

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
    short = min(ttfts(short_samples), default=None)
    done = [s for s in long_samples if s.ok and s.events and s.itl_ms]
    long = min(ttfts(done), default=None)
    interval = median([sum(s.itl_ms) / len(s.itl_ms) for s in done])
    event_bytes = median([s.body_bytes / s.events for s in done])
    mss = median([float(s.segment_bytes) for s in done if s.segment_bytes])
    if short is None or long is None or not interval or not event_bytes or not mss:
        return None
    growth = long - short
    return SegmentFill(growth, interval, event_bytes, max(0.0, growth) / interval * event_bytes, int(mss))


def ttfts(samples: tuple[RequestSample, ...] | list[RequestSample]) -> list[float]:
    """TTFTs without connection setup (ms) of the streams that completed."""
    return [s.ttft_after_setup_ms for s in samples if s.ok and s.ttft_after_setup_ms is not None]


def per_read_summary(samples: tuple[RequestSample, ...] | list[RequestSample]) -> dict[str, Any]:
    """The per-read picture of some streams: how many, median TTFT, most token events one read carried, the
    largest gap between token events (ms), and the sizes of the reads that carried several events (bytes)."""
    done = [s for s in samples if s.ok]
    ttft = median(ttfts(done))
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
        times = ttfts(group)
        mid = median(times)
        if mid is not None and len(times) >= 2:
            deviations.extend(t - mid for t in times)
    if len(deviations) < 3:
        return None
    return robust_sd(deviations)
