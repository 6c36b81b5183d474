"""``request-header-bloat`` on hand-built evidence: the server's wait against padding size, priced at the client's
own header size."""

from __future__ import annotations

import dataclasses

from latscope.checks.headers import HeaderEvidence, HeaderPoint, browser_sizes_wanted, check_header_bloat
from latscope.findings import Clear, Confidence, Finding, NotTested
from tests.checks.builders import REF, failed, ok

KB = 1024


def _points(*waits: float, sizes: tuple[int, ...] = (0, 12 * KB, 24 * KB)) -> tuple[HeaderPoint, ...]:
    pairs = zip(sizes[: len(waits)], waits, strict=True)
    return tuple(HeaderPoint(size, ok(f"headers +{size // KB} KB", wait_ms=w)) for size, w in pairs)


def test_bloated_headers_on_a_server_that_pays_per_kb_are_a_finding_costed_at_their_size() -> None:
    # 0.5 ms per KB and a 16 KB token: 8 ms per request
    out = check_header_bloat(HeaderEvidence(16 * KB, _points(5.0, 11.0, 17.0)), REF)
    assert isinstance(out, Finding)
    assert abs(out.cost_ms - 8.0) < 0.01 and out.confidence is Confidence.HIGH
    assert "16.0 KB" in out.rule and "Never truncate" in out.fix


def test_small_headers_are_clear_on_a_sweep_without_browser_sizes() -> None:
    out = check_header_bloat(HeaderEvidence(400, _points(5.0, 11.0, 17.0)), REF)
    assert isinstance(out, Clear) and "400 bytes" in out.reason and "not measured" in out.reason


#: The quick sweep's sizes: the control, a browser's 4 and 8 KB, then past the bloat line.
SWEEP = (0, 4 * KB, 8 * KB, 12 * KB, 24 * KB)
#: 2 ms per KB of headers, as the issue's server spent: a browser's 4 KB costs it 8 ms.
TWO_MS_PER_KB = (5.0, 13.0, 21.0, 29.0, 53.0)


def _sweep(waits: tuple[float, ...], *, fresh: bool = False, http: str = "HTTP/1.1") -> tuple[HeaderPoint, ...]:
    kind = " new connection" if fresh else ""
    return tuple(
        HeaderPoint(size, ok(f"headers +{size // KB} KB{kind}", wait_ms=w, reused=not fresh, http_version=http))
        for size, w in zip(SWEEP, waits, strict=True)
    )


def test_a_lean_client_of_a_server_that_pays_per_kb_is_told_what_a_browsers_head_costs() -> None:
    ev = HeaderEvidence(400, _sweep(TWO_MS_PER_KB), fresh=_sweep(TWO_MS_PER_KB, fresh=True))
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM, out
    assert abs(out.cost_ms - 8.0) < 0.01 and "browser" in out.cost_basis and "400 bytes" in out.cost_basis
    assert out.evidence["browser_sizes"]["cost_ms_by_kb"] == {"2": 4.0, "4": 8.0, "8": 16.0}


def test_over_http2_a_browsers_repeated_headers_are_not_priced_per_request() -> None:
    ev = HeaderEvidence(
        400, _sweep(TWO_MS_PER_KB, http="HTTP/2"), fresh=_sweep(TWO_MS_PER_KB, fresh=True, http="HTTP/2")
    )
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Clear) and "HTTP/2" in out.reason and "indexed" in out.reason, out


def test_a_browser_size_slope_one_kind_of_connection_alone_shows_is_not_a_cost() -> None:
    # the reused sweep drifted upwards by 8 ms per size step; the new connections, sent between them, did not
    flat = (6.0, 6.1, 6.0, 6.2, 6.1)
    ev = HeaderEvidence(400, _sweep(TWO_MS_PER_KB), fresh=_sweep(flat, fresh=True))
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Clear) and "other kind of connection" in out.reason, out


#: The lab's header-scan fault, 0.5 ms per KB over a 3 ms control (3, 5, 7, 9, 15 ms), as one CI run's busy host left
#: it (a host only adds time): the whole line steady (0.43 ms per KB, r² 0.96), the three requests up to 8 KB
#: scattered (0.24 ms per KB, r² 0.56).
SCAN_SCATTERED = (5.5, 5.0, 7.4, 9.0, 15.0)


def _again(*waits: float, fresh: bool = False) -> tuple[HeaderPoint, ...]:
    kind = " new connection" if fresh else ""
    return tuple(
        HeaderPoint(size, ok(f"headers +{size // KB} KB again 1{kind}", wait_ms=w, reused=not fresh))
        for size, w in zip(SWEEP[:3], waits, strict=True)
    )


def test_a_browser_line_the_host_scattered_is_priced_through_each_sizes_fastest_request_sent_again() -> None:
    ev = HeaderEvidence(400, _sweep(SCAN_SCATTERED), fresh=_sweep(SCAN_SCATTERED, fresh=True))
    first = check_header_bloat(ev, REF)
    assert isinstance(first, Clear) and "steady" in first.reason, first
    assert browser_sizes_wanted(ev)
    # sent again, each size's fastest request on each kind makes the line: 0.5 ms per KB, a 4 KB head 2 ms
    again = dataclasses.replace(
        ev, small_repeats=_again(3.0, 5.0, 7.0), fresh_small_repeats=_again(3.1, 5.1, 7.1, fresh=True)
    )
    out = check_header_bloat(again, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM, out
    assert abs(out.cost_ms - 2.0) < 0.01
    assert out.evidence["browser_sizes"]["wait_ms_by_pad_kb"] == {"0": 3.0, "4": 5.0, "8": 7.0}
    assert out.evidence["browser_sizes"]["sent_again"] == 3
    assert browser_sizes_wanted(again)  # the whole sweep still prices it: what the repeats are for


def test_the_browser_sizes_are_not_sent_again_where_the_whole_sweep_prices_nothing_or_the_client_is_bloated() -> None:
    flat = (6.0, 6.4, 5.9, 6.2, 6.1)  # a server that spends nothing per byte: its small line is noise too
    assert not browser_sizes_wanted(HeaderEvidence(400, _sweep(flat), fresh=_sweep(flat, fresh=True)))
    bloated = HeaderEvidence(16 * KB, _sweep(SCAN_SCATTERED), fresh=_sweep(SCAN_SCATTERED, fresh=True))
    assert not browser_sizes_wanted(bloated)  # priced at its own headers, on the whole line
    over_h2 = HeaderEvidence(400, _sweep(SCAN_SCATTERED, http="HTTP/2"), fresh=_sweep(SCAN_SCATTERED, fresh=True))
    assert not browser_sizes_wanted(over_h2)  # not priced per request over HTTP/2 at all


def test_bloated_headers_on_a_server_whose_time_does_not_grow_are_clear() -> None:
    out = check_header_bloat(HeaderEvidence(16 * KB, _points(5.0, 5.1, 5.05)), REF)
    assert isinstance(out, Clear) and "does not grow" in out.reason


def test_one_slow_request_is_not_a_trend() -> None:
    # the middle request alone took 4 ms longer: a hiccup, not a per-byte cost
    out = check_header_bloat(HeaderEvidence(16 * KB, _points(5.0, 9.0, 6.2)), REF)
    assert isinstance(out, Clear) and "r²" in out.reason


def test_a_cost_below_a_millisecond_is_clear() -> None:
    out = check_header_bloat(HeaderEvidence(9 * KB, _points(1.0, 1.5, 2.0)), REF)  # 0.04 ms/KB × 9 KB
    assert isinstance(out, Clear) and "below" in out.reason


def test_a_refusal_ends_the_sweep_and_is_reported() -> None:
    ev = HeaderEvidence(16 * KB, _points(5.0, 11.0), refused_at_bytes=24 * KB, refused="HTTP 431")
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM  # two points: no fit quality to judge
    assert out.evidence["refused_at_pad_bytes"] == 24 * KB and "refused at 24 KB" in out.rule


def test_a_failed_control_is_not_tested() -> None:
    ev = HeaderEvidence(16 * KB, (HeaderPoint(0, failed("headers +0 KB")), *_points(11.0, sizes=(12 * KB,))))
    assert isinstance(check_header_bloat(ev, REF), NotTested)


def test_a_refusal_of_the_first_padding_is_not_tested() -> None:
    ev = HeaderEvidence(16 * KB, _points(5.0, sizes=(0,)), refused_at_bytes=12 * KB, refused="HTTP 400")
    out = check_header_bloat(ev, REF)
    assert isinstance(out, NotTested) and "HTTP 400" in out.reason


def _fresh(*waits: float, sizes: tuple[int, ...] = (0, 12 * KB, 24 * KB)) -> tuple[HeaderPoint, ...]:
    pairs = zip(sizes[: len(waits)], waits, strict=True)
    return tuple(HeaderPoint(s, ok(f"headers +{s // KB} KB new connection", wait_ms=w, reused=False)) for s, w in pairs)


def _reused(*waits: float, reused: bool = True) -> tuple[HeaderPoint, ...]:
    return tuple(HeaderPoint(p.pad_bytes, dataclasses.replace(p.sample, reused=reused)) for p in _points(*waits))


def test_both_lines_are_in_the_evidence_and_the_reused_one_prices_a_kept_alive_client() -> None:
    # reused: 0.5 ms per KB; new connections: 1 ms per KB (a head past the initial window waits for ACKs)
    ev = HeaderEvidence(16 * KB, _reused(5.0, 11.0, 17.0), fresh=_fresh(6.0, 18.0, 30.0))
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Finding) and abs(out.cost_ms - 8.0) < 0.01
    assert out.evidence["priced_on"] == "reused connections"
    assert out.evidence["reused_connections"]["ms_per_kb"] == 0.5
    assert out.evidence["new_connections"]["ms_per_kb"] == 1.0
    assert out.evidence["new_connections"]["wait_ms_by_pad_kb"] == {"0": 6.0, "12": 18.0, "24": 30.0}
    assert "1.000 ms per KB on new connections" in out.rule


def test_a_server_that_keeps_no_connection_open_is_priced_on_the_new_connections_line() -> None:
    # every request of the "reused" sweep went on a new connection: the client's requests all pay a fresh head
    ev = HeaderEvidence(16 * KB, _reused(5.0, 11.0, 17.0, reused=False), fresh=_fresh(6.0, 18.0, 30.0))
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Finding) and abs(out.cost_ms - 16.0) < 0.01
    assert out.evidence["priced_on"] == "new connections" and "new connection's head" in out.cost_basis


def test_growth_on_new_connections_alone_is_clear_for_a_kept_alive_client_and_says_so() -> None:
    ev = HeaderEvidence(16 * KB, _reused(5.0, 5.1, 5.05), fresh=_fresh(6.0, 18.0, 30.0))
    out = check_header_bloat(ev, REF)
    assert isinstance(out, Clear) and "on reused connections" in out.reason
    assert "1.000 ms per KB on new connections" in out.reason


def test_a_failed_fresh_control_leaves_the_reused_line_to_price() -> None:
    fresh = (HeaderPoint(0, failed("headers +0 KB new connection")), *_fresh(18.0, sizes=(12 * KB,)))
    out = check_header_bloat(HeaderEvidence(16 * KB, _reused(5.0, 11.0, 17.0), fresh=fresh), REF)
    assert isinstance(out, Finding) and out.evidence["new_connections"] is None
