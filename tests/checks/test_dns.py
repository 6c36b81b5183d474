"""The ``slow-dns`` check on hand-built evidence: the connection experiment's new connections, each with its own
lookup (dns phase) and TCP connect (the control: one round trip to the server)."""

from __future__ import annotations

from latscope.checks.connection import ConnectionEvidence
from latscope.checks.dns import check_slow_dns
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, failed, ok


def new_conn(cid: int, dns: float | None, connect: float = 10.0) -> RequestSample:
    return ok(f"conn {cid}", reused=False, connection_id=cid, dns_ms=dns, connect_ms=connect, rtt_ms=connect)


def reused(cid: int) -> RequestSample:
    return ok(f"conn {cid} again", reused=True, connection_id=cid)


def evidence(lookups: list[float | None], connect: float = 10.0, host: str = "api.example.test") -> ConnectionEvidence:
    """Three sequential requests on connection 1 (its lookup the first), then one new connection per further lookup."""
    first, *rest = lookups
    return ConnectionEvidence(
        tls=False,
        sequential=(new_conn(1, first, connect), reused(1), reused(1)),
        fresh=tuple(new_conn(i + 2, dns, connect) for i, dns in enumerate(rest)),
        host=host,
        host_is_ip=False,
    )


def test_finding_when_every_lookup_costs_more_than_a_round_trip_to_the_server() -> None:
    out = check_slow_dns(evidence([31.0, 30.0, 30.5, 32.0, 30.2]), REF)
    assert isinstance(out, Finding) and out.id == "slow-dns"
    assert out.cost_ms == 30.2  # the lower quartile of the five lookups: ms per new connection
    assert out.severity is Severity.HIGH  # three times the typical TTFT of 10 ms
    assert out.confidence is Confidence.HIGH
    assert out.evidence["repeats_cached"] is False and out.evidence["connect_ms"] == 10.0
    assert "not answered from a cache" in out.rule and "api.example.test" in out.cost_basis


def test_a_lookup_answered_from_the_hosts_file_is_clear_even_beside_a_loopback_connect() -> None:
    # "localhost" on loopback: the lookup (0.2 ms, the worker thread's hop) exceeds the connect (0.05 ms), but no
    # query left the host
    out = check_slow_dns(evidence([0.25, 0.2, 0.18, 0.22, 0.3], connect=0.05, host="localhost"), REF)
    assert isinstance(out, Clear) and out.id == "slow-dns"
    assert "answered locally" in out.reason and out.evidence["lookup_ms"] == 0.2
    assert out.evidence["repeats_cached"] is None  # the first lookup was fast already: nothing to compare


def test_lookups_faster_than_the_connect_are_clear() -> None:
    # a resolver on the same LAN (2 ms) in front of a server 40 ms away: resolution is a small share of the setup
    out = check_slow_dns(evidence([2.5, 2.0, 2.2, 2.1, 2.4], connect=40.0), REF)
    assert isinstance(out, Clear) and "TCP connect" in out.reason


def test_a_cache_that_answers_the_repeats_is_clear_though_the_first_lookup_was_slow() -> None:
    out = check_slow_dns(evidence([35.0, 0.3, 0.2, 0.25, 0.3]), REF)
    assert isinstance(out, Clear) and "cached" in out.reason
    assert out.evidence["repeats_cached"] is True and out.evidence["first_lookup_ms"] == 35.0


def test_an_ip_literal_target_is_not_tested() -> None:
    ev = ConnectionEvidence(
        tls=False, sequential=(new_conn(1, None), reused(1), reused(1)), host="127.0.0.1", host_is_ip=True
    )
    out = check_slow_dns(ev, REF)
    assert isinstance(out, NotTested) and "IP address" in out.reason and "127.0.0.1" in out.reason


def test_no_connection_that_resolved_is_not_tested() -> None:
    ev = ConnectionEvidence(tls=False, sequential=(new_conn(1, None), reused(1), reused(1)), host="api.example.test")
    out = check_slow_dns(ev, REF)
    assert isinstance(out, NotTested) and "no new connection resolved" in out.reason


def test_a_target_that_failed_most_requests_is_not_tested() -> None:
    ev = ConnectionEvidence(
        tls=False,
        sequential=(new_conn(1, 30.0), failed(), failed()),
        fresh=(failed(), new_conn(2, 30.0)),
        host="api.example.test",
    )
    out = check_slow_dns(ev, REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason


def test_one_slow_lookup_without_a_repeat_is_inconclusive() -> None:
    out = check_slow_dns(evidence([30.0]), REF)
    assert isinstance(out, Inconclusive) and "repeat" in out.reason


def test_a_few_slow_outliers_do_not_make_a_finding() -> None:
    # a busy host delays a lookup now and then; the lower quartile stays the resolver's own cost
    out = check_slow_dns(evidence([0.3, 25.0, 0.2, 0.3, 28.0, 0.25]), REF)
    assert isinstance(out, Clear)
