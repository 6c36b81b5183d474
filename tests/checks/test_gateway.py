"""``gateway-queueing`` on hand-built evidence: time before any server-reported work, at a low rate and in a burst."""

from __future__ import annotations

import pytest

from latscope.checks.gateway import GatewayQueueEvidence, check_gateway_queueing, unaccounted_ms
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Finding, NotTested
from latscope.timeline.model import ServerPhase
from tests.checks.builders import REF, failed, ok

#: What a 40 ms round trip adds to every request's time to its first token, control and burst alike.
RTT_MS = 40.0


def _req(ttft_ms: float, queue_ms: float | None = 0.5, prefill_ms: float = 3.0, label: str = "r") -> RequestSample:
    server = {ServerPhase.PARSE: 0.1, ServerPhase.VALIDATE: 0.2, ServerPhase.PREFILL: prefill_ms}
    if queue_ms is not None:
        server[ServerPhase.QUEUE] = queue_ms
    return ok(label, status=200, ttft_after_setup_ms=ttft_ms, server_ms=server)


def _low(base_ms: float = RTT_MS + 5.0) -> tuple[RequestSample, ...]:
    return tuple(_req(base_ms + jitter) for jitter in (0.0, 0.6, -0.4, 0.3))


def _ev(low: tuple[RequestSample, ...], high: tuple[RequestSample, ...]) -> GatewayQueueEvidence:
    return GatewayQueueEvidence(150.0, low, high)


def test_unaccounted_time_is_ttft_less_every_reported_phase_before_the_first_token() -> None:
    assert unaccounted_ms(_req(50.0, queue_ms=10.0)) == pytest.approx(50.0 - 0.1 - 0.2 - 10.0 - 3.0)
    assert unaccounted_ms(_req(50.0, queue_ms=None)) is None  # no queue phase: nothing tells where a wait was


def test_a_burst_held_before_the_server_across_a_40_ms_path_is_a_finding() -> None:
    # a limiter at 10/s with a burst of 2: the rest wait 100, 200, 300, 400 ms; the server's phases stay flat
    high = tuple(_req(RTT_MS + 5.0 + wait) for wait in (0.0, 0.0, 100.0, 200.0, 300.0, 400.0))
    outcome = check_gateway_queueing(_ev(_low(), high), REF)
    assert isinstance(outcome, Finding)
    assert outcome.cost_ms == pytest.approx(1000.0 / 6, abs=1.0)  # the mean wait per burst request
    assert outcome.evidence["waited"] == 4


def test_a_burst_that_waited_in_the_engines_reported_queue_is_not_a_gateways() -> None:
    # an engine out of slots: the same growth, but the server says it was queue time (capacity-saturation's case)
    high = tuple(_req(RTT_MS + 5.0 + wait, queue_ms=0.5 + wait) for wait in (0.0, 0.0, 100.0, 200.0, 300.0, 400.0))
    outcome = check_gateway_queueing(_ev(_low(), high), REF)
    assert isinstance(outcome, Clear)


def test_the_client_reading_several_streams_at_once_is_not_a_queue() -> None:
    high = tuple(_req(RTT_MS + 5.0 + extra) for extra in (1.0, 2.0, 3.0, 3.5, 4.0, 5.0))
    assert isinstance(check_gateway_queueing(_ev(_low(), high), REF), Clear)


def test_one_slow_request_of_the_burst_is_a_stall_not_a_queue() -> None:
    high = tuple(_req(RTT_MS + 5.0 + extra) for extra in (0.0, 0.0, 0.0, 0.0, 0.0, 250.0))
    assert isinstance(check_gateway_queueing(_ev(_low(), high), REF), Clear)


def test_requests_held_alike_by_one_stall_are_not_a_queue() -> None:
    # a host stall of ~25 ms catching three requests of the burst at once: they waited, but together, not in line
    high = tuple(_req(RTT_MS + 5.0 + extra) for extra in (0.0, 0.0, 0.0, 24.0, 26.0, 27.0))
    outcome = check_gateway_queueing(_ev(_low(), high), REF)
    assert isinstance(outcome, Clear) and "all alike" in outcome.reason, outcome
    assert outcome.evidence["stair_share"] < 0.3


def _bare(ttft_ms: float, service_ms: float = 20.0) -> RequestSample:
    """A request to a server that reports no phases at all, 40 ms away: its end ``service_ms`` after a round trip."""
    return ok("r", status=200, ttft_after_setup_ms=ttft_ms, e2e_after_setup_ms=RTT_MS + service_ms, rtt_ms=RTT_MS)


def test_a_limiter_in_front_of_a_server_without_queue_times_is_named_by_its_pace() -> None:
    # a limiter at 10/s letting two through at once: the rest come 100 ms apart, five lone service times
    low = tuple(_bare(45.0 + jitter) for jitter in (0.0, 0.6, -0.4, 0.3))
    high = tuple(_bare(45.0 + wait) for wait in (0.0, 0.0, 100.0, 200.0, 300.0, 400.0))
    outcome = check_gateway_queueing(_ev(low, high), REF)
    assert isinstance(outcome, Finding) and outcome.confidence.value == "medium", outcome
    assert outcome.evidence["told_by"].startswith("pace") and outcome.evidence["pace_ms"] == pytest.approx(100.0)
    assert outcome.cost_ms == pytest.approx(1000.0 / 6 - 0.15, abs=0.5)


def test_a_burst_served_one_after_another_by_the_engine_is_clear_by_its_pace() -> None:
    # one slot: each request's first token a lone request's whole service time (20 ms) after the one before
    low = tuple(_bare(45.0 + jitter) for jitter in (0.0, 0.6, -0.4, 0.3))
    high = tuple(_bare(45.0 + 21.0 * k) for k in range(6))
    outcome = check_gateway_queueing(_ev(low, high), REF)
    assert isinstance(outcome, Clear) and "one after another by the engine" in outcome.reason, outcome


def test_a_server_without_queue_times_or_a_measured_service_time_is_not_tested() -> None:
    low = tuple(_req(45.0, queue_ms=None) for _ in range(4))
    high = tuple(_req(45.0 + wait, queue_ms=None) for wait in (0.0, 0.0, 100.0, 200.0, 300.0, 400.0))
    outcome = check_gateway_queueing(_ev(low, high), REF)
    assert isinstance(outcome, NotTested) and "no queue time" in outcome.reason, outcome


def test_refusals_leave_it_to_rate_limited() -> None:
    high = (*(_req(45.0) for _ in range(4)), failed("burst 5/6"), failed("burst 6/6"))
    outcome = check_gateway_queueing(_ev(_low(), high), REF)
    assert isinstance(outcome, NotTested) and "rate-limited" in outcome.reason
