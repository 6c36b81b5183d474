"""``trace-context-dropped`` on hand-built evidence: the trace id sent against the ones the response names."""

from __future__ import annotations

from latscope.checks.samples import RequestSample
from latscope.checks.tracecontext import TraceContextEvidence, check_trace_context
from latscope.findings import Clear, Finding, NotTested, Severity
from latscope.signals.traceresponse import ReturnedTraceId
from tests.checks.builders import REF, failed, ok

SENT = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def _ev(*returned: ReturnedTraceId, sample: RequestSample | None = None) -> TraceContextEvidence:
    return TraceContextEvidence(sample=sample or ok("traceparent"), sent_trace_id=SENT, returned=returned)


def test_the_sent_trace_id_coming_back_is_clear() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("traceresponse", SENT, True)), REF)
    assert isinstance(out, Clear) and "traceresponse" in out.reason


def test_a_request_id_header_containing_the_sent_id_is_enough_to_clear() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("x-request-id", SENT, False)), REF)
    assert isinstance(out, Clear) and "x-request-id" in out.reason


def test_a_different_trace_id_in_traceresponse_is_a_zero_cost_low_finding() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("traceresponse", OTHER, True)), REF)
    assert isinstance(out, Finding)
    assert out.cost_ms == 0.0 and out.severity is Severity.LOW
    assert SENT in out.rule and OTHER in out.rule
    assert out.evidence["returned"] == [{"source": "traceresponse", "trace_id": OTHER}]


def test_a_different_trace_id_in_server_timing_is_a_finding() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("server-timing", OTHER, True)), REF)
    assert isinstance(out, Finding) and "server-timing" in out.rule


def test_the_sent_id_anywhere_outweighs_another_trace_elsewhere() -> None:
    # a gateway's own traceresponse beside an upstream that echoed the client's id: the id did travel on
    out = check_trace_context(
        _ev(ReturnedTraceId("traceresponse", OTHER, True), ReturnedTraceId("x-request-id", SENT, False)), REF
    )
    assert isinstance(out, Clear)


def test_no_trace_id_in_the_response_is_not_tested() -> None:
    out = check_trace_context(_ev(), REF)
    assert isinstance(out, NotTested) and "no trace id" in out.reason


def test_a_failed_request_without_a_trace_id_is_not_tested_and_says_why() -> None:
    out = check_trace_context(_ev(sample=failed("traceparent")), REF)
    assert isinstance(out, NotTested) and "429" in out.reason


def test_a_request_without_a_traceparent_of_ours_is_not_tested() -> None:
    out = check_trace_context(TraceContextEvidence(sample=ok(), sent_trace_id=None), REF)
    assert isinstance(out, NotTested)


def test_the_sent_trace_id_in_the_body_alone_is_clear_and_names_the_body() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("body", SENT, False)), REF)
    assert isinstance(out, Clear) and "body" in out.reason
    assert out.evidence["returned"] == [{"source": "body", "trace_id": SENT}]


def test_another_trace_id_the_body_states_is_a_finding() -> None:
    out = check_trace_context(_ev(ReturnedTraceId("body", OTHER, True)), REF)
    assert isinstance(out, Finding) and "body" in out.rule and OTHER in out.rule
