"""`diagnose` through a real nginx: each edge fault → its finding (medium or high) and nothing else above low; the
tuned edge → nothing above low.

The origin is the tuned lab (keep-alive, TCP_NODELAY, ``X-Accel-Buffering: no``), so whatever the diagnosis finds
comes from nginx's directives, with nginx's own timings and quirks rather than the lab's: it buffers a proxied
stream only over TLS + HTTP/1.1 (16 KB ``ssl_buffer_size`` bursts; over HTTP/2 it forwards each write), and with
``tcp_nodelay off`` its Nagle hold shows even on fresh connections. The tuned edge and two fault cases run the whole
battery (a false positive anywhere fails them); the connection faults run only the connection checks.
"""

from __future__ import annotations

import pytest

from latscope.diagnose import Diagnosis, diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.findings import Severity
from latscope.lab.edge.config import EdgeConfig
from latscope.lab.edge.lab import EdgeLab
from latscope.wire.target import Target
from tests.diagnose.truth import TEST_COST
from tests.edge.support import needs_nginx
from tests.support.diagnosis import explain

pytestmark = needs_nginx

CONNECTION_IDS = ("no-connection-reuse", "tls-no-resumption", "http2-not-negotiated")
STREAMING_IDS = ("stream-coalescing-nagle", "stream-proxy-buffering")


async def _diagnose(*faults: str, only: tuple[str, ...] | None = None) -> tuple[Diagnosis, str]:
    """A quick diagnosis of the lab behind nginx with ``faults``; also nginx's error log for failure messages."""
    async with EdgeLab(faults=faults, cost=TEST_COST) as lab:
        result = await diagnose(
            Target.resolve(lab.url, ca_file=str(lab.cert_path), timeouts=REQUEST_TIMEOUTS), quick=True, only=only
        )
        log = lab.edge.error_log_tail() if lab.edge is not None else ""
    return result, log


def _above_low(result: Diagnosis) -> set[str]:
    return {f.id for f in result.findings if f.severity.rank > Severity.LOW.rank}


def _failed_experiments(result: Diagnosis) -> list[str]:
    return [f"{e.name}: {e.status} {e.message}" for e in result.experiments if e.status != "ok"]


async def test_the_tuned_edge_has_nothing_above_low() -> None:
    result, log = await _diagnose()
    assert not _failed_experiments(result), explain(result) + "\n" + log
    assert _above_low(result) == set(), explain(result)
    clear = {c.id for c in result.clear}
    assert {*CONNECTION_IDS, "queue-head-of-line", "stream-coalescing-nagle"} <= clear, explain(result)
    assert result.target["alpn"] == "h2" and str(result.target["server"]).startswith("nginx")


async def test_proxy_buffering_over_tls_without_http2_is_named_with_the_missing_http2() -> None:
    # what a user of this nginx sees: HTTP/1.1 over TLS, where nginx holds the stream in 16 KB bursts
    result, log = await _diagnose("proxy-buffering", "no-h2")
    assert not _failed_experiments(result), explain(result) + "\n" + log
    assert _above_low(result) == {"stream-proxy-buffering", "http2-not-negotiated"}, explain(result)
    buffering = result.finding("stream-proxy-buffering")
    assert buffering is not None
    assert buffering.evidence["protocol"] == "HTTP/1.1"
    assert buffering.evidence["held_fraction"] > 0.5, buffering.evidence  # most of the generation is held back
    assert buffering.evidence["bursty_streams"] >= 1, buffering.evidence
    assert "X-Accel-Buffering" in buffering.rule  # nginx is told to ignore the origin's header


async def test_proxy_buffering_behind_http2_is_found_over_http11() -> None:
    # HTTP/2 clients are not held, but clients that speak only HTTP/1.1 (most SDKs) are: the finding says so
    result, log = await _diagnose("proxy-buffering", only=STREAMING_IDS)
    assert _above_low(result) == {"stream-proxy-buffering"}, explain(result) + "\n" + log
    buffering = result.finding("stream-proxy-buffering")
    assert buffering is not None and buffering.evidence["protocol"] == "HTTP/1.1"
    assert buffering.evidence["other_protocol"]["protocol"] == "HTTP/2"
    assert buffering.evidence["other_protocol"]["outcome"] == "clear", buffering.evidence
    assert "HTTP/1.1" in buffering.cost_basis


async def test_nagle_at_the_edge_is_named_alone() -> None:
    result, log = await _diagnose("nagle")
    assert not _failed_experiments(result), explain(result) + "\n" + log
    assert _above_low(result) == {"stream-coalescing-nagle"}, explain(result)
    nagle = result.finding("stream-coalescing-nagle")
    assert nagle is not None
    # the mechanism: the first token waits for the delayed ACK with the tokens generated meanwhile behind it
    assert nagle.evidence["hold_ms"] >= 20.0 and nagle.evidence["start_coalesced_streams"] >= 1, nagle.evidence


@pytest.mark.parametrize(
    ("fault", "finding_id"),
    [
        ("tls-no-tickets", "tls-no-resumption"),
        ("no-h2", "http2-not-negotiated"),
        ("no-keepalive", "no-connection-reuse"),
        ("short-keepalive", "no-connection-reuse"),
    ],
)
async def test_a_connection_fault_at_the_edge_is_named_alone(fault: str, finding_id: str) -> None:
    result, log = await _diagnose(fault, only=CONNECTION_IDS)
    assert _above_low(result) == {finding_id}, explain(result) + "\n" + log
    assert {c.id for c in result.clear} == set(CONNECTION_IDS) - {finding_id}, explain(result)


async def test_an_edge_that_strips_traceparent_is_named_and_the_tuned_edge_passes_it_on() -> None:
    tuned, _ = await _diagnose(only=("trace-context-dropped", "response-cached"))
    assert {c.id for c in tuned.clear} == {"trace-context-dropped", "response-cached"}, explain(tuned)
    result, log = await _diagnose("drop-trace-context", only=("trace-context-dropped",))
    finding = result.finding("trace-context-dropped")
    assert finding is not None, explain(result) + "\n" + log
    assert finding.evidence["returned"][0]["trace_id"] != finding.evidence["sent_trace_id"]


def _held_by_nginx_ms(access_log: str, request_ids: list[str]) -> float:
    """Mean time nginx held the requests ``request_ids`` before its answer began to come from the origin, ms: its
    own ``$request_time`` less ``$upstream_response_time`` (the origin's whole response, streamed through as it
    came), from its access log; the request ids are the origin's ``x-request-id``, which nginx logs."""
    held: dict[str, float] = {}
    for line in access_log.splitlines():
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        rid = fields.get("request_id")
        if rid in request_ids:
            held[rid] = (float(fields["request_time"]) - float(fields["upstream_response"])) * 1000.0
    assert set(held) == set(request_ids), (sorted(held), request_ids)
    return sum(held.values()) / len(held)


async def test_nginx_limit_req_refusing_is_named_rate_limited_with_its_retry_after() -> None:
    async with EdgeLab(faults=["rate-limit"], cost=TEST_COST) as lab:
        result = await diagnose(
            Target.resolve(lab.url, ca_file=str(lab.cert_path), timeouts=REQUEST_TIMEOUTS),
            quick=True,
            only=("rate-limited", "gateway-queueing"),
        )
        log = lab.edge.error_log_tail() if lab.edge is not None else ""
    finding = result.finding("rate-limited")
    assert finding is not None, explain(result) + "\n" + log
    assert finding.evidence["answers"][0]["status"] == 429, finding.evidence
    # the wait is what nginx said (the Retry-After its configuration adds to a refusal), not a guess
    limit = EdgeConfig.from_faults(["rate-limit"], tls=True).rate_limit
    assert limit is not None and finding.cost_ms == limit.retry_after_s * 1000.0, finding.evidence
    assert _above_low(result) - {"rate-limited"} == set(), explain(result)


async def test_nginx_limit_req_queueing_is_named_gateway_queueing_with_the_time_nginx_held_requests() -> None:
    async with EdgeLab(faults=["gateway-queue"], cost=TEST_COST) as lab:
        result = await diagnose(
            Target.resolve(lab.url, ca_file=str(lab.cert_path), timeouts=REQUEST_TIMEOUTS),
            quick=True,
            only=("rate-limited", "gateway-queueing"),
        )
        log = lab.edge.error_log_tail() if lab.edge is not None else ""
        access_path = lab.edge.access_log_path if lab.edge is not None else None
        access = access_path.read_text() if access_path is not None else ""
    assert _above_low(result) == {"gateway-queueing"}, explain(result) + "\n" + log
    assert "rate-limited" in {c.id for c in result.clear}, explain(result)  # it held, it never refused
    finding = result.finding("gateway-queueing")
    assert finding is not None
    real = _held_by_nginx_ms(access, finding.evidence["high_request_ids"])
    assert abs(finding.cost_ms - real) <= 0.25 * real, (finding.cost_ms, real, finding.evidence)


@pytest.mark.parametrize(
    ("fault", "evidence"), [("response-cache", "headers"), ("silent-response-cache", "replay")], ids=["said", "silent"]
)
async def test_an_nginx_proxy_cache_in_front_is_named_response_cached(fault: str, evidence: str) -> None:
    result, log = await _diagnose(fault, only=("response-cached", "trace-context-dropped"))
    finding = result.finding("response-cached")
    assert finding is not None, explain(result) + "\n" + log
    if evidence == "headers":
        headers = finding.evidence["cache_headers"]
        assert headers["first"]["status"] == "MISS" and headers["repeat"]["status"] == "HIT", finding.evidence
        assert headers["repeat"]["source"] == "x-cache-status", finding.evidence  # nginx's own convention
    else:
        assert finding.confidence.value == "medium", finding.evidence  # the replay's speed and text alone
    assert _above_low(result) == {"response-cached"}, explain(result)
