"""The streaming checks on hand-built evidence: Nagle (delayed-ACK A/B) and proxy buffering (TTFT vs max_tokens)."""

from __future__ import annotations

import dataclasses

from latscope.checks.samples import RequestSample
from latscope.checks.streaming import StreamEvidence, check_nagle, check_proxy_buffering
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, ok, reset


def stream(
    ttft: float,
    *,
    e2e: float | None = None,
    reused: bool = True,
    first_read: int = 1,
    per_read: int = 1,
    bursts: tuple[int, ...] = (),
    accel: str | None = "no",
) -> RequestSample:
    return ok(
        "stream",
        ttft_after_setup_ms=ttft,
        e2e_after_setup_ms=e2e if e2e is not None else ttft + 180.0,
        reused=reused,
        first_read_token_events=first_read,
        max_token_events_per_read=max(per_read, first_read),
        burst_bytes=bursts,
        x_accel_buffering=accel,
    )


QUICK = (stream(4.0), stream(4.3), stream(4.1))
QUICK_SHORT = (stream(4.2, e2e=5.0), stream(4.0, e2e=4.8), stream(4.4, e2e=5.1))


def ev(**conditions: object) -> StreamEvidence:
    fields: dict[str, object] = {"max_tokens": 16, "quickack": QUICK, "quickack_short": QUICK_SHORT}
    fields.update(conditions)
    return StreamEvidence(**fields)  # type: ignore[arg-type]


# -- stream-coalescing-nagle ---------------------------------------------------------------------------------------
def test_nagle_finding_on_reused_connections() -> None:
    held = (stream(46.0, first_read=5), stream(44.0, first_read=4), stream(47.0, first_read=5))
    out = check_nagle(ev(reused=held), REF)
    assert isinstance(out, Finding) and out.id == "stream-coalescing-nagle"
    assert out.cost_ms == 41.9  # 46.0 − 4.1, the quickack control
    assert out.severity is Severity.HIGH and out.confidence is Confidence.HIGH
    assert out.evidence["condition"] == "reused" and "masked" not in out.cost_basis


def test_nagle_finding_through_forced_delayed_acks_when_connections_are_not_reused() -> None:
    fresh_quick = tuple(stream(s.ttft_after_setup_ms or 0.0, reused=False) for s in QUICK)
    not_reused = (stream(4.2, reused=False), stream(4.0, reused=False))
    delayed = (stream(45.0, reused=False, first_read=4), stream(43.0, reused=False, first_read=4))
    out = check_nagle(ev(reused=not_reused, delayed_ack=delayed, quickack=fresh_quick), REF)
    assert isinstance(out, Finding) and out.evidence["condition"] == "delayed_ack"
    assert "masked today" in out.cost_basis


def test_nagle_delayed_ack_streams_are_judged_against_quickack_on_new_connections() -> None:
    # a new connection's first request costs 25 ms more here, whatever the ACKs do: against the reused quickack
    # control that looks like a hold, against quickack on new connections it is nothing
    not_reused = (stream(4.2, reused=False), stream(4.0, reused=False))
    delayed = (stream(29.0, reused=False, first_read=2), stream(29.5, reused=False, first_read=2))
    fresh_quick = (stream(29.2, reused=False), stream(29.1, reused=False))
    unmatched = check_nagle(ev(reused=not_reused, delayed_ack=delayed), REF)
    assert not isinstance(unmatched, Clear)
    out = check_nagle(ev(reused=not_reused, delayed_ack=delayed, quickack_fresh=fresh_quick), REF)
    assert isinstance(out, Clear), out
    assert out.evidence["control"] == "quickack_fresh" and out.evidence["ttft_quickack_ms_p50"] == 29.15
    # a real hold still stands out against the matched control
    held = (stream(71.0, reused=False, first_read=4), stream(70.0, reused=False, first_read=4))
    found = check_nagle(ev(reused=not_reused, delayed_ack=held, quickack_fresh=fresh_quick), REF)
    assert isinstance(found, Finding) and found.cost_ms == 41.35


def test_nagle_clear_when_delayed_acks_change_nothing() -> None:
    out = check_nagle(ev(reused=(stream(4.2), stream(4.5)), delayed_ack=(stream(4.4, reused=False),)), REF)
    assert isinstance(out, Clear) and "nothing waited" in out.reason


def test_nagle_clear_behind_a_buffering_proxy_where_every_stream_is_late_alike() -> None:
    buffered = (stream(186.0, per_read=16), stream(185.0, per_read=16))
    out = check_nagle(ev(reused=buffered, quickack=buffered, delayed_ack=(stream(186.5, reused=False),)), REF)
    assert isinstance(out, Clear)


def test_nagle_inconclusive_when_only_some_streams_are_held() -> None:
    mixed = (stream(45.0, first_read=4), stream(4.2), stream(4.4))
    out = check_nagle(ev(reused=mixed), REF)
    assert isinstance(out, Inconclusive) and "1 of 3" in out.reason


def test_nagle_not_tested_without_a_delayed_ack_condition() -> None:
    out = check_nagle(ev(reused=(stream(4.0, reused=False),), delayed_ack_supported=False), REF)
    assert isinstance(out, NotTested) and "no connection was reused" in out.reason


def test_nagle_not_tested_without_the_quickack_control() -> None:
    out = check_nagle(ev(reused=(stream(45.0),), quickack=(reset(), reset()), quickack_short=()), REF)
    assert isinstance(out, NotTested)


def test_nagle_not_tested_when_the_platform_has_no_quickack() -> None:
    out = check_nagle(ev(reused=(stream(45.0),), quickack_supported=False), REF)
    assert isinstance(out, NotTested) and "TCP_QUICKACK" in out.reason


def test_streaming_checks_not_tested_when_streams_keep_failing() -> None:
    broken = ev(reused=(reset(), reset(), stream(4.0)), delayed_ack=(reset(), reset()))
    for check in (check_nagle, check_proxy_buffering):
        out = check(broken, REF)
        assert isinstance(out, NotTested) and "reset" in out.reason


# -- stream-proxy-buffering ------------------------------------------------------------------------------------------
def test_proxy_finding_when_ttft_grows_with_max_tokens() -> None:
    held = tuple(stream(186.0 + d, e2e=186.5 + d, per_read=16, bursts=(3300,), accel=None) for d in (0.0, 0.5, -0.4))
    out = check_proxy_buffering(ev(quickack=held, reused=held), REF)
    assert isinstance(out, Finding) and out.id == "stream-proxy-buffering"
    assert out.cost_ms == 186.0 - 4.2
    assert out.severity is Severity.HIGH and out.confidence is Confidence.HIGH
    assert out.evidence["held_fraction"] > 0.9 and "X-Accel-Buffering" in out.rule


def test_proxy_clear_when_ttft_does_not_depend_on_max_tokens() -> None:
    out = check_proxy_buffering(ev(), REF)
    assert isinstance(out, Clear) and "not held back" in out.reason


def test_proxy_inconclusive_when_little_of_the_generation_is_held() -> None:
    partial = tuple(stream(24.0 + d, e2e=180.0) for d in (0.0, 0.2, -0.2))
    out = check_proxy_buffering(ev(quickack=partial), REF)
    assert isinstance(out, Inconclusive)


def test_proxy_not_tested_without_completed_streams() -> None:
    out = check_proxy_buffering(ev(quickack=(reset(),), quickack_short=(reset(),)), REF)
    assert isinstance(out, NotTested)


def test_nagle_evidence_carries_the_per_read_picture_of_each_condition() -> None:
    held = (stream(46.0, first_read=5, bursts=(1100,)), stream(44.0, first_read=4, bursts=(900,)))
    out = check_nagle(ev(reused=held, fresh=(stream(4.0, reused=False),)), REF)
    assert isinstance(out, Finding)
    per_read = out.evidence["per_read"]
    assert set(per_read) == {"fresh", "reused", "quickack"}
    assert per_read["reused"]["max_token_events_per_read"] == 5 and per_read["reused"]["burst_bytes"] == [900, 1100]
    assert per_read["fresh"]["max_token_events_per_read"] == 1


def test_proxy_not_tested_when_the_platform_has_no_quickack() -> None:
    out = check_proxy_buffering(ev(quickack_supported=False), REF)
    assert isinstance(out, NotTested) and "Nagle cannot be excluded" in out.reason


def test_nagle_inconclusive_when_one_of_two_streams_is_late() -> None:
    # quick mode has two streams per condition: one stalled stream is not a majority (measured through nginx)
    out = check_nagle(ev(reused=(stream(70.0, first_read=3), stream(5.0))), REF)
    assert isinstance(out, Inconclusive) and "1 of 2" in out.reason


def test_nagle_clear_when_late_streams_carry_their_first_token_alone() -> None:
    # 40 ms late with a token every 6 ms: a held first token would have six more behind it in the same read; alone,
    # it was late before the server wrote it (a busy host), not held by Nagle
    late = tuple(
        ok("late", ttft_after_setup_ms=t, reused=True, first_read_token_events=1, itl_ms=(6.0,) * 15)
        for t in (44.0, 46.0)
    )
    out = check_nagle(ev(reused=late), REF)
    assert isinstance(out, Clear) and out.evidence["late_streams_without_pileup"] == 2
    assert "alone" in out.reason


def test_proxy_clear_when_ttft_grows_but_every_first_token_arrives_alone() -> None:
    # TTFT noise between the two lengths, while the streams show one event per read at a 6 ms cadence
    noisy = tuple(
        ok("q", ttft_after_setup_ms=t, e2e_after_setup_ms=t + 90.0, first_read_token_events=1, itl_ms=(6.0,) * 15)
        for t in (30.0, 31.0)
    )
    out = check_proxy_buffering(ev(quickack=noisy), REF)
    assert isinstance(out, Clear) and "arrived alone" in out.reason


def test_proxy_finding_over_http11_when_http2_streams_are_not_held() -> None:
    # nginx with proxy buffering over TLS: HTTP/2 forwarded as it comes, HTTP/1.1 held in 16 KB bursts
    h2 = tuple(dataclasses.replace(s, http_version="HTTP/2") for s in QUICK)
    h2_short = tuple(dataclasses.replace(s, http_version="HTTP/2") for s in QUICK_SHORT)
    held = tuple(stream(186.0 + d, e2e=186.5 + d, per_read=16, bursts=(3300,), accel=None) for d in (0.0, 0.5, -0.4))
    evidence = ev(quickack=h2, quickack_short=h2_short, quickack_http11=held, quickack_short_http11=QUICK_SHORT)
    out = check_proxy_buffering(evidence, REF)
    assert isinstance(out, Finding) and out.evidence["protocol"] == "HTTP/1.1"
    assert out.evidence["other_protocol"]["protocol"] == "HTTP/2"
    assert out.evidence["other_protocol"]["outcome"] == "clear"
    assert "over HTTP/1.1" in out.rule and "only HTTP/1.1" in out.cost_basis


def test_proxy_clear_needs_both_protocols_clear() -> None:
    out = check_proxy_buffering(ev(quickack_http11=QUICK, quickack_short_http11=QUICK_SHORT), REF)
    assert isinstance(out, Clear) and out.evidence["other_protocol"]["outcome"] == "clear"
    partial = tuple(stream(24.0 + d, e2e=180.0) for d in (0.0, 0.2, -0.2))
    out = check_proxy_buffering(ev(quickack_http11=partial, quickack_short_http11=QUICK_SHORT), REF)
    assert isinstance(out, Inconclusive) and "HTTP/1.1" in out.reason


def test_proxy_finding_when_every_stream_shows_the_hold_however_noisy_the_ttfts() -> None:
    # two samples a side, one max_tokens-1 request stalled 60 ms: the spread is large, but every long stream's first
    # token came in one read with all the others, which is the buffering itself
    held = (
        stream(95.0, e2e=95.5, first_read=16, bursts=(3300,), accel=None),
        stream(96.0, e2e=96.5, first_read=16, bursts=(3300,), accel=None),
    )
    short = (stream(4.0, e2e=4.8), stream(64.0, e2e=64.8))
    out = check_proxy_buffering(ev(quickack=held, quickack_short=short), REF)
    assert isinstance(out, Finding) and out.evidence["every_stream_held"] is True
    assert out.evidence["noise_sd_ms"] > out.cost_ms / 3


def test_nagle_clear_when_a_late_first_token_came_alone_though_later_tokens_arrive_several_to_a_read() -> None:
    # a token every 6 ms, read four at a time after the start across a network path (gaps 0, 0, 0, 24: the median
    # is 0): streams 26–28 ms late with their first token alone were not held — four tokens would be behind it
    gaps = (0.0, 0.0, 0.0, 24.0) * 8
    late = (
        ok("late", ttft_after_setup_ms=t, reused=True, first_read_token_events=1, itl_ms=gaps) for t in (30.0, 32.0)
    )
    out = check_nagle(ev(reused=tuple(late)), REF)
    assert isinstance(out, Clear) and out.evidence["late_streams_without_pileup"] == 2, out
