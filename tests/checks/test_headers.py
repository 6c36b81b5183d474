"""``request-header-bloat`` on hand-built evidence: the server's wait against padding size, priced at the client's
own header size."""

from __future__ import annotations

from latscope.checks.evidence import HeaderEvidence, HeaderPoint
from latscope.checks.headers import check_header_bloat
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


def test_small_headers_are_clear_even_on_a_server_that_pays_per_kb() -> None:
    out = check_header_bloat(HeaderEvidence(400, _points(5.0, 11.0, 17.0)), REF)
    assert isinstance(out, Clear) and "400 bytes" in out.reason


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
