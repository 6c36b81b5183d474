"""The streaming checks at network distance, on hand-built evidence: Nagle's other releases (a filled segment, the
ACK clock of partial segments) and what keeps a buffer from passing for them."""

from __future__ import annotations

import dataclasses

import pytest

from latscope.checks.samples import RequestSample
from latscope.checks.streaming import StreamEvidence, check_nagle, check_proxy_buffering
from latscope.checks.streaming.measures import ack_clock
from latscope.findings import Clear, Finding, Inconclusive
from latscope.timeline.model import ConnectionInfo, EventKind, Read, StreamEvent, TcpInfo, Timeline
from tests.checks.builders import REF, ok

MSS = 1448
RTT = 40.0
INTERVAL = 6.6
EVENT_BYTES = 258


def remote(
    ttft: float,
    *,
    tokens: int = 32,
    gaps: tuple[float, ...] = (),
    reads: tuple[int, ...] = (),
    interval: float = INTERVAL,
    rtt: float | None = RTT,
    reused: bool = True,
    event_bytes: int = EVENT_BYTES,
) -> RequestSample:
    """A stream across a ``rtt`` ms path: ``tokens`` tokens ``interval`` ms apart, ``reads`` the token events per
    read (one each by default), ``gaps`` the partial-segment gaps, ``event_bytes`` each event's size."""
    per_read = reads or (1,) * tokens
    return ok(
        "stream",
        ttft_after_setup_ms=ttft,
        e2e_after_setup_ms=ttft + interval * (tokens - 1),
        reused=reused,
        rtt_ms=rtt,
        segment_bytes=MSS,
        body_bytes=event_bytes * tokens,
        events=tokens,
        output_tokens=tokens,
        itl_ms=(interval,) * (tokens - 1),
        first_read_token_events=per_read[0],
        max_token_events_per_read=max(per_read),
        token_read_events=per_read,
        partial_read_gaps_ms=gaps,
        x_accel_buffering="no",
    )


#: Nagle at 40 ms RTT: partial segments a round trip apart, each read carrying the tokens written meanwhile; the
#: first token held behind the headers' ACK, with 3 more tokens written by then
CLOCKED_READS = (4, 5, 1, 5, 1, 6, 1, 5, 4)
CLOCKED_GAPS = (40.6, 40.4, 40.5, 40.9, 40.2)
#: the same stream written as generated: one token per read, partial segments a token interval apart
FREE_GAPS = (INTERVAL,) * 31


def clocked(ttft: float) -> RequestSample:
    return remote(ttft, gaps=CLOCKED_GAPS, reads=CLOCKED_READS)


def ev(**fields: object) -> StreamEvidence:
    base: dict[str, object] = {"max_tokens": 32}
    base.update(fields)
    return StreamEvidence(**base)  # type: ignore[arg-type]


def test_ack_clock_needs_several_tokens_per_round_trip() -> None:
    # on loopback (RTT 0.05 ms) the ACK always beats the next token: nothing to see, whatever the reads
    assert ack_clock([remote(5.0, gaps=CLOCKED_GAPS, reads=CLOCKED_READS, rtt=0.05)]) is None
    assert ack_clock([remote(5.0, gaps=(1.0,) * 3)]) is None  # too few gaps
    clock = ack_clock([clocked(64.0), clocked(65.0)])
    assert clock is not None and clock.clocked and not clock.free
    assert clock.first_hold_ms == pytest.approx(3 * INTERVAL)
    free = ack_clock([remote(45.0, gaps=FREE_GAPS), remote(46.0, gaps=FREE_GAPS)])
    assert free is not None and free.free and not free.clocked and free.token_hold_ms == 0.0


def test_nagle_found_by_its_ack_clock_where_quickack_changes_nothing() -> None:
    # the nginx case across 20 ms each way: with quickack on the stream is held exactly as in delayed-ACK mode, and
    # the max_tokens-1 stream waits longer (its token waits a whole round trip for the headers' ACK)
    quick = (clocked(64.4), clocked(64.6))
    short = (remote(84.0, tokens=1), remote(85.0, tokens=1))
    out = check_nagle(ev(reused=(clocked(65.0), clocked(65.2)), quickack=quick, quickack_short=short), REF)
    assert isinstance(out, Finding) and out.id == "stream-coalescing-nagle"
    assert out.cost_ms == pytest.approx(3 * INTERVAL, abs=0.05)
    assert out.evidence["ack_clock"]["spacing_rtt_share"] > 0.9
    assert "partial TCP segments" in out.rule


def test_nagle_clear_at_distance_when_partial_segments_follow_the_tokens() -> None:
    free = (remote(45.0, gaps=FREE_GAPS), remote(45.5, gaps=FREE_GAPS))
    short = (remote(45.2, tokens=1), remote(45.1, tokens=1))
    out = check_nagle(ev(reused=free, quickack=free, quickack_short=short), REF)
    assert isinstance(out, Clear), out


def test_nagle_inconclusive_when_the_spacing_is_neither_a_token_nor_a_round_trip() -> None:
    half = tuple(0.45 * RTT for _ in range(8))
    streams = (remote(45.0, gaps=half), remote(45.5, gaps=half))
    short = (remote(45.2, tokens=1), remote(45.1, tokens=1))
    out = check_nagle(ev(reused=streams, quickack=streams, quickack_short=short), REF)
    assert isinstance(out, Inconclusive) and "partial segments" in out.reason


def test_a_buffer_whose_bursts_come_a_round_trip_apart_is_not_nagle() -> None:
    # a proxy that holds the first token 150 ms and then releases bursts: its partial segments may come a round
    # trip apart, but the first token waited for more than one spacing, which Nagle never does
    burst = (
        remote(200.0, gaps=CLOCKED_GAPS, reads=CLOCKED_READS),
        remote(201.0, gaps=CLOCKED_GAPS, reads=CLOCKED_READS),
    )
    short = (remote(46.0, tokens=1), remote(47.0, tokens=1))
    evidence = ev(reused=burst, quickack=burst, quickack_short=short)
    assert not isinstance(check_nagle(evidence, REF), Finding)
    assert isinstance(check_proxy_buffering(evidence, REF), Finding)


def test_proxy_clear_when_the_ttft_growth_is_one_ack_clock_spacing() -> None:
    # over the clocked stream the first token with max_tokens 32 waited 18 ms more than alone: less than the 40 ms
    # between partial segments, Nagle's hold and not a buffer's
    quick = (clocked(64.0), clocked(64.5))
    short = (remote(46.0, tokens=1), remote(46.5, tokens=1))
    out = check_proxy_buffering(ev(reused=quick, quickack=quick, quickack_short=short), REF)
    assert isinstance(out, Clear) and "round trip apart" in out.reason


def test_one_stalled_control_does_not_make_a_segment_fill_a_buffer() -> None:
    # the naive lab 20 ms away behind 20 Mbit/s: 294-byte events every 4.9 ms fill a 1448-byte segment in 24 ms,
    # sooner than the 40 ms round trip brings an ACK, so every stream's start waits about 17 ms for the fill with
    # quickack on or off. One of the two quickack streams stalled 48 ms more: the median of the two put the hold at
    # 1.7 segments, past what Nagle waits for, and called it a buffer; the fastest stream shows the hold alone
    def stream(ttft: float, reused: bool = True) -> RequestSample:
        return remote(ttft, tokens=16, interval=4.9, reads=(3, 4, 4, 3, 2), reused=reused, event_bytes=294)

    short = (remote(46.8, tokens=1, event_bytes=294), remote(46.8, tokens=1, event_bytes=294))
    evidence = ev(
        max_tokens=16,
        reused=(stream(63.6), stream(63.6)),
        quickack=(stream(64.0), stream(112.3)),
        quickack_short=short,
        quickack_fresh=(stream(64.4, reused=False), stream(64.4, reused=False)),
        delayed_ack=(stream(63.8, reused=False), stream(63.8, reused=False)),
    )
    nagle = check_nagle(evidence, REF)
    assert isinstance(nagle, Finding), nagle
    assert nagle.evidence["segment_fill"]["held_segments"] < 1.0
    assert "segment" in nagle.rule
    proxy = check_proxy_buffering(evidence, REF)
    assert isinstance(proxy, Clear) and "one TCP segment" in proxy.reason, proxy
    # a buffer holds every stream: with both quickack streams that late it is still one
    held = ev(
        max_tokens=16,
        reused=(stream(112.0), stream(112.3)),
        quickack=(stream(112.0), stream(112.3)),
        quickack_short=short,
    )
    assert isinstance(check_proxy_buffering(held, REF), Finding)


def test_a_buffered_stream_does_not_lower_the_delayed_ack_threshold() -> None:
    # behind a buffer every token reaches the client in one burst (gaps of 0.03 ms), which would make a segment
    # "fill" in a fraction of a millisecond; a 1.7 ms difference between delayed-ACK and quickack streams is noise
    def burst(ttft: float) -> RequestSample:
        return remote(ttft, tokens=16, interval=0.03, reads=(16,))

    short = (remote(46.0, tokens=1), remote(46.3, tokens=1))
    out = check_nagle(
        ev(
            max_tokens=16,
            reused=(burst(139.1), burst(139.2)),
            quickack=(burst(137.4), burst(137.5)),
            quickack_short=short,
        ),
        REF,
    )
    assert not isinstance(out, Finding), out
    assert out.evidence["min_hold_ms"] == 20.0


def test_a_lateness_inside_the_controls_spread_is_not_a_hold() -> None:
    # llama-cpp-python across 20 ms each way: a token every 2.3 ms fills a segment in 13 ms, so a hold of 6.5 ms
    # would count, but the quickack controls themselves spread 6 ms; one delayed-ACK stream 8 ms late is that spread
    fast = 2.3
    free = tuple(fast for _ in range(31))

    def stream(ttft: float, reused: bool = True, first_read: int = 1) -> RequestSample:
        reads = (first_read,) + (1,) * (32 - first_read)
        return remote(ttft, interval=fast, gaps=free, reused=reused, reads=reads)

    short = (remote(66.0, tokens=1, interval=fast), remote(67.0, tokens=1, interval=fast))
    quick = (stream(60.0), stream(72.0))
    quick_fresh = (stream(61.0, reused=False), stream(73.0, reused=False))
    delayed = (stream(75.0, reused=False, first_read=2), stream(68.0, reused=False, first_read=2))
    out = check_nagle(
        ev(
            reused=(stream(64.0), stream(69.0)),
            quickack=quick,
            quickack_short=short,
            quickack_fresh=quick_fresh,
            delayed_ack=delayed,
        ),
        REF,
    )
    assert isinstance(out, Clear), out
    assert (
        out.evidence["mechanism_min_hold_ms"] < out.evidence["late_ms"]["delayed_ack"][0] < out.evidence["min_hold_ms"]
    )
    assert "spread" in out.reason
    # late like that against quiet controls, with the tokens written meanwhile piled behind the first, it is a hold
    quiet = ev(
        reused=(stream(66.0), stream(66.2)),
        quickack=(stream(66.0), stream(66.1)),
        quickack_short=short,
        quickack_fresh=(stream(67.0, reused=False), stream(67.1, reused=False)),
        delayed_ack=(stream(75.0, reused=False, first_read=4), stream(75.5, reused=False, first_read=4)),
    )
    assert not isinstance(check_nagle(quiet, REF), Clear)


def _read(at_ms: float, nbytes: int) -> Read:
    return Read(int(at_ms * 1_000_000), nbytes)


def test_partial_read_gaps_from_a_timeline() -> None:
    reads = [_read(0.0, 300), _read(30.0, 1290), _read(40.0, 516), _read(70.0, 1290), _read(80.5, 258)]
    token = EventKind.CONTENT
    events = [
        StreamEvent(reads[1].at_ns, 1, token, 4, 1, None),
        StreamEvent(reads[1].at_ns, 1, token, 4, 1, None),
        StreamEvent(reads[2].at_ns, 2, token, 4, 1, None),
        StreamEvent(reads[3].at_ns, 3, token, 4, 1, None),
        StreamEvent(reads[4].at_ns, 4, token, 4, 1, None),
    ]
    tcp = TcpInfo(
        rtt_us=40_000, rttvar_us=100, min_rtt_us=40_000, total_retrans=0, snd_cwnd=10, ato_us=40_000, rcv_mss=MSS
    )
    t = Timeline(reads=reads, events=events, connection=ConnectionInfo(1, False, tcp_info_at_end=tcp))
    sample = RequestSample.from_timeline(t)
    # the header read (before the first token) and the full-segment reads are left out
    assert sample.partial_read_gaps_ms == (40.5,)
    assert sample.token_read_events == (2, 1, 1, 1)
    without_mss = Timeline(reads=reads, events=events, connection=ConnectionInfo(1, False))
    assert RequestSample.from_timeline(without_mss).partial_read_gaps_ms == ()


def test_the_segment_size_is_the_paths_not_the_536_byte_start() -> None:
    # rcv_mss starts at 536 and grows only when a segment that large arrives: a server writing small events with
    # TCP_NODELAY never sends one, so on loopback (32 KB segments) it stayed at 536; the client's send MSS is the
    # path's
    reads = [_read(0.0, 300), _read(1.0, 234), _read(2.4, 234)]
    events = [StreamEvent(r.at_ns, i + 1, EventKind.CONTENT, 4, 1, None) for i, r in enumerate(reads[1:])]

    def sample(rcv_mss: int | None, snd_mss: int | None) -> RequestSample:
        tcp = TcpInfo(10, 5, 8, 0, 10, 40_000, rcv_mss=rcv_mss, snd_mss=snd_mss)
        return RequestSample.from_timeline(
            Timeline(reads=reads, events=events, connection=ConnectionInfo(1, False, tcp_info_at_end=tcp))
        )

    assert sample(536, 32768).segment_bytes == 32768
    assert sample(1448, 1448).segment_bytes == 1448
    assert sample(2896, 1448).segment_bytes == 2896  # a receive offload's larger segments: the largest seen
    assert sample(536, None).segment_bytes == 536  # a record written before snd_mss was read
    assert sample(None, None).segment_bytes is None


def test_a_loopback_stream_two_milliseconds_late_is_not_nagle() -> None:
    # llama-cpp-python (uvicorn, TCP_NODELAY) on loopback in a busy full run: 234-byte events every 1.4 ms, and two
    # of three delayed-ACK streams read their first token 2 ms late with the next one beside it (the client was
    # descheduled). Against a 536-byte segment (rcv_mss's start) the fill time was 3.1 ms and a 1.6 ms lateness
    # counted as Nagle's hold; a 32 KB loopback segment takes 196 ms to fill, so only the delayed ACK can hold
    fast = 1.4

    def stream(ttft: float, reused: bool = True, first_read: int = 1, segment: int = 32768) -> RequestSample:
        reads = (first_read,) + (1,) * (32 - first_read)
        sample = remote(ttft, interval=fast, rtt=0.01, reused=reused, reads=reads, event_bytes=234)
        return dataclasses.replace(sample, segment_bytes=segment)

    def evidence(segment: int) -> StreamEvidence:
        return ev(
            reused=(stream(15.6, segment=segment), stream(15.7, segment=segment), stream(15.5, segment=segment)),
            quickack=(stream(15.5, segment=segment), stream(15.6, segment=segment), stream(15.5, segment=segment)),
            quickack_short=tuple(remote(15.9, tokens=1, rtt=0.01, event_bytes=234) for _ in range(3)),
            quickack_fresh=tuple(stream(15.8, reused=False, segment=segment) for _ in range(3)),
            delayed_ack=(
                stream(17.9, reused=False, first_read=2, segment=segment),
                stream(18.0, reused=False, first_read=2, segment=segment),
                stream(15.9, reused=False, segment=segment),
            ),
        )

    out = check_nagle(evidence(32768), REF)
    assert isinstance(out, Clear), out
    assert out.evidence["min_hold_ms"] == 20.0
    # the same streams judged against a 536-byte segment: what named Nagle before
    assert isinstance(check_nagle(evidence(536), REF), Finding)
