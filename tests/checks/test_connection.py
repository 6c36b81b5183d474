"""The connection checks on hand-built evidence: reuse, TLS resumption, HTTP/2."""

from __future__ import annotations

import pytest

from latscope.checks.connection import (
    ConcurrencyEvidence,
    ConnectionEvidence,
    check_connection_reuse,
    check_http2,
    check_tls_resumption,
)
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, failed, ok, reset


def new_conn(
    cid: int,
    *,
    connect: float = 0.3,
    tls: float | None = None,
    resumed: bool | None = None,
    offered: bool | None = None,
    close: bool = False,
    alpn: str | None = None,
    http: str = "HTTP/1.1",
    version: str | None = None,
    rtt: float = 0.02,
) -> RequestSample:
    return ok(
        f"conn {cid}",
        reused=False,
        connection_id=cid,
        connect_ms=connect,
        tls_ms=tls,
        tls_resumed=resumed,
        tls_offered=offered,
        response_close=close,
        alpn=alpn,
        http_version=http,
        tls_version=version,
        rtt_ms=rtt,
    )


def reused_conn(cid: int, http: str = "HTTP/1.1", alpn: str | None = None, rtt: float | None = None) -> RequestSample:
    return ok(f"conn {cid} again", reused=True, connection_id=cid, http_version=http, alpn=alpn, rtt_ms=rtt)


# -- no-connection-reuse ---------------------------------------------------------------------------------------------
def test_reuse_finding_when_every_request_opens_a_new_connection() -> None:
    ev = ConnectionEvidence(
        tls=False,
        sequential=(
            new_conn(1, close=True),
            new_conn(2, close=True, connect=0.5),
            new_conn(3, close=True, connect=0.4),
        ),
    )
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Finding) and out.id == "no-connection-reuse"
    assert out.cost_ms == 0.35  # the lower quartile of the new connections' dns+connect+tls
    assert out.severity is Severity.MEDIUM  # 4 % of TTFT would be low: structural defects are at least medium
    assert out.confidence is Confidence.HIGH
    assert "Connection: close" in out.rule and "round trip" in out.cost_basis
    assert out.evidence["reused"] == [False, False, False]


def test_reuse_finding_names_the_round_trip_a_silent_close_outlasted() -> None:
    # no Connection: close, yet each request after the first opened a new connection, 40 ms from the server: the
    # idle time it saw between a response and the next request was at least that round trip
    far = (
        new_conn(1, rtt=40.2, connect=40.5),
        new_conn(2, rtt=40.3, connect=40.6),
        new_conn(3, rtt=40.2, connect=40.4),
    )
    out = check_connection_reuse(ConnectionEvidence(tls=False, sequential=far), REF)
    assert isinstance(out, Finding) and "round trip (40.2 ms)" in out.rule
    near = (new_conn(1), new_conn(2), new_conn(3))
    out = check_connection_reuse(ConnectionEvidence(tls=False, sequential=near), REF)
    assert isinstance(out, Finding) and "round trip" not in out.rule


def test_reuse_finding_is_high_when_a_new_connection_costs_a_quarter_of_ttft() -> None:
    ev = ConnectionEvidence(
        tls=True,
        sequential=(
            new_conn(1, connect=1.0, tls=3.0, version="TLSv1.2"),
            new_conn(2, connect=1.0, tls=3.0, version="TLSv1.2"),
        ),
    )
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Finding) and out.severity is Severity.HIGH and out.cost_ms == 4.0
    assert out.evidence["round_trips_per_new_connection"] == 3  # TCP + TLS 1.2's two


def test_reuse_partial_is_a_medium_confidence_finding() -> None:
    ev = ConnectionEvidence(tls=False, sequential=(new_conn(1), reused_conn(1), new_conn(2)))
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM
    assert out.rule.startswith("1 of 2 requests")


def test_reuse_clear_when_later_requests_share_the_first_connection() -> None:
    idle = ((0.5, reused_conn(7)), (2.0, reused_conn(7)))
    ev = ConnectionEvidence(tls=False, sequential=(new_conn(7), reused_conn(7), reused_conn(7)), idle=idle)
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Clear) and "after 2 s idle reused connection #7" in out.reason


def test_reuse_finding_when_the_keepalive_dies_during_a_users_pause() -> None:
    idle = ((0.5, new_conn(8, connect=0.6)), (2.0, new_conn(9, connect=0.6)))
    ev = ConnectionEvidence(tls=False, sequential=(new_conn(7), reused_conn(7), reused_conn(7)), idle=idle)
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.HIGH
    assert "after 0.5 s idle" in out.rule and "under 0.5 s" in out.rule
    assert "pause of 0.5 s or more" in out.cost_basis and out.severity is Severity.MEDIUM
    assert out.evidence["reused_after_idle"] == [False, False]


def test_reuse_finding_brackets_the_keepalive_timeout() -> None:
    idle = ((0.5, reused_conn(7)), (2.0, new_conn(9)))
    ev = ConnectionEvidence(tls=False, sequential=(new_conn(7), reused_conn(7), reused_conn(7)), idle=idle)
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, Finding) and "between 0.5 and 2 s" in out.rule


def test_reuse_not_tested_when_the_first_request_failed() -> None:
    ev = ConnectionEvidence(tls=False, sequential=(failed("s1"), new_conn(2), new_conn(3)))
    out = check_connection_reuse(ev, REF)
    assert isinstance(out, NotTested) and "429" in out.reason


def test_reuse_not_tested_when_the_target_misbehaves() -> None:
    seq = (new_conn(1), reused_conn(1), reset("s3"))
    out = check_connection_reuse(ConnectionEvidence(tls=True, sequential=seq, fresh=(failed("f1"),)), REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason and "reset" in out.reason


def test_reuse_inconclusive_without_a_measured_setup() -> None:
    seq = (ok("a", reused=False, connection_id=1), ok("b", reused=False, connection_id=2))
    out = check_connection_reuse(ConnectionEvidence(tls=False, sequential=seq), REF)
    assert isinstance(out, Inconclusive)


# -- tls-no-resumption ---------------------------------------------------------------------------------------------
def test_resumption_not_tested_over_plain_http() -> None:
    out = check_tls_resumption(ConnectionEvidence(tls=False, sequential=(new_conn(1), reused_conn(1))), REF)
    assert isinstance(out, NotTested) and "plain HTTP" in out.reason


def test_resumption_finding_when_offered_sessions_are_never_resumed() -> None:
    seq = (new_conn(1, tls=2.0, resumed=False, offered=False, version="TLSv1.3"), reused_conn(1))
    fresh = (new_conn(2, tls=1.6, resumed=False, offered=True), new_conn(3, tls=1.8, resumed=False, offered=True))
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq, fresh=fresh), REF)
    assert isinstance(out, Finding) and out.id == "tls-no-resumption"
    # the lower quartile of the handshakes that offered the session (not the cold first one), less the round trip a
    # resumed one would still take
    assert out.cost_ms == pytest.approx(1.65 - out.evidence["rtt_ms"])
    assert out.severity is Severity.MEDIUM and "0 of 2" in out.rule


def test_what_resumption_saves_a_remote_client_is_the_handshake_beyond_its_round_trip() -> None:
    far = 40.0
    seq = (new_conn(1, tls=47.0, resumed=False, offered=False, version="TLSv1.3", rtt=far), reused_conn(1, rtt=far))
    fresh = tuple(new_conn(n, tls=46.5, resumed=False, offered=True, rtt=far) for n in (2, 3))
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq, fresh=fresh), REF)
    assert isinstance(out, Finding) and out.cost_ms == pytest.approx(6.5)
    assert out.evidence["full_handshake_ms"] == pytest.approx(46.5) and "round trip" in out.cost_basis


def test_resumption_clear_when_a_session_is_resumed() -> None:
    seq = (new_conn(1, tls=2.0, resumed=False, offered=False), reused_conn(1))
    fresh = (new_conn(2, tls=0.9, resumed=True, offered=True),)
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq, fresh=fresh), REF)
    assert isinstance(out, Clear) and "1 of 1" in out.reason
    assert out.evidence["resumed_handshake_ms"] == 0.9 and out.evidence["full_handshake_ms"] == 2.0


def test_resumption_not_tested_when_no_session_could_be_offered() -> None:
    seq = (new_conn(1, tls=2.0, resumed=False, offered=False), reused_conn(1))
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq), REF)
    assert isinstance(out, NotTested) and "no new connection" in out.reason


# -- http2-not-negotiated -------------------------------------------------------------------------------------------
H2 = ("h2", "http/1.1")


def test_http2_not_tested_over_plain_http() -> None:
    out = check_http2(ConnectionEvidence(tls=False, sequential=(new_conn(1),)), REF)
    assert isinstance(out, NotTested) and "ALPN" in out.reason


def test_http2_clear_when_h2_is_selected() -> None:
    seq = (new_conn(1, alpn="h2", http="HTTP/2"), reused_conn(1, http="HTTP/2", alpn="h2"))
    out = check_http2(ConnectionEvidence(tls=True, sequential=seq, offered_alpn=H2), REF)
    assert isinstance(out, Clear) and "h2" in out.reason


def test_http2_finding_costs_the_queued_requests_pool_wait() -> None:
    seq = (new_conn(1, alpn="http/1.1"), reused_conn(1, alpn="http/1.1"))
    first_wave = [ok(f"c{i}", pool_ms=0.1, connection_id=i) for i in range(6)]
    queued = [ok(f"q{i}", pool_ms=100.0 + i, connection_id=i) for i in range(6)]
    stalled = [ok(f"s{i}", pool_ms=150.0, connection_id=i) for i in range(6)]
    conc = ConcurrencyEvidence(6, (tuple(first_wave + queued), tuple(first_wave + stalled)))
    out = check_http2(ConnectionEvidence(tls=True, sequential=seq, offered_alpn=H2, concurrency=conc), REF)
    assert isinstance(out, Finding) and out.id == "http2-not-negotiated"
    assert out.cost_ms == 102.5  # median wait of the six queued requests, in the quieter burst
    assert out.severity is Severity.HIGH and "selected http/1.1" in out.rule
    assert out.evidence["connections_used"] == 6


def test_http2_finding_without_concurrency_is_structural_with_no_cost() -> None:
    seq = (new_conn(1, alpn="http/1.1"),)
    out = check_http2(ConnectionEvidence(tls=True, sequential=seq, offered_alpn=H2), REF)
    assert isinstance(out, Finding) and out.cost_ms == 0.0 and out.severity is Severity.MEDIUM
    assert "not measured" in out.cost_basis


def test_http2_not_tested_when_no_connection_was_made() -> None:
    out = check_http2(
        ConnectionEvidence(tls=True, sequential=(failed(kind="refused", status=None),), offered_alpn=H2), REF
    )
    assert isinstance(out, NotTested)


def test_resumption_not_tested_when_the_target_misbehaves() -> None:
    seq = (new_conn(1, tls=2.0, resumed=False, offered=False), failed("s2"))
    fresh = (failed("f1"), new_conn(3, tls=1.8, resumed=False, offered=True))
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq, fresh=fresh), REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason


def test_resumption_inconclusive_without_a_measured_handshake() -> None:
    fresh = (ok("f", reused=False, connection_id=2, tls_offered=True, tls_resumed=False),)
    seq = (ok("s", reused=False, connection_id=1, tls_offered=False, tls_resumed=False),)
    out = check_tls_resumption(ConnectionEvidence(tls=True, sequential=seq, fresh=fresh), REF)
    assert isinstance(out, Inconclusive)


def test_http2_not_tested_when_h2_was_not_offered() -> None:
    seq = (new_conn(1, alpn="http/1.1"),)
    out = check_http2(ConnectionEvidence(tls=True, sequential=seq, offered_alpn=("http/1.1",)), REF)
    assert isinstance(out, NotTested) and "did not offer h2" in out.reason
