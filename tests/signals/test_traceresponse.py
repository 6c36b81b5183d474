"""The trace ids a response names: ``traceresponse``, a Server-Timing ``traceparent`` metric, id headers."""

from __future__ import annotations

from latscope.signals.traceresponse import ReturnedTraceId, returned_trace_ids

SENT = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def test_traceresponse_names_the_servers_trace() -> None:
    headers = {"traceresponse": f"00-{OTHER}-b7ad6b7169203331-01"}
    assert returned_trace_ids(headers, sent_trace_id=SENT) == [ReturnedTraceId("traceresponse", OTHER, True)]


def test_an_upstreams_traceresponse_a_gateway_renamed_still_names_the_upstreams_trace() -> None:
    # LiteLLM's proxy passes its upstream's response headers on prefixed with llm_provider-
    headers = [
        ("x-litellm-call-id", "e0f87897-9595-4ad9-8e54-300e298fd695"),
        ("llm_provider-traceresponse", f"00-{OTHER}-75eecc2da48cfcfd-01"),
    ]
    found = returned_trace_ids(headers, sent_trace_id=SENT)
    assert found == [ReturnedTraceId("llm_provider-traceresponse", OTHER, True)]


def test_the_servers_own_traceresponse_comes_before_an_upstreams() -> None:
    headers = [
        ("llm_provider-traceresponse", f"00-{OTHER}-75eecc2da48cfcfd-01"),
        ("traceresponse", f"00-{SENT}-b7ad6b7169203331-01"),
    ]
    assert [r.source for r in returned_trace_ids(headers)] == ["traceresponse", "llm_provider-traceresponse"]


def test_a_server_timing_traceparent_metric_names_the_servers_trace() -> None:
    headers = [("Server-Timing", f'total;dur=12, traceparent;desc="00-{SENT}-b7ad6b7169203331-01"')]
    assert returned_trace_ids(headers) == [ReturnedTraceId("server-timing", SENT, True)]


def test_an_id_header_counts_only_when_it_contains_the_sent_id() -> None:
    assert returned_trace_ids({"x-request-id": OTHER}, sent_trace_id=SENT) == []
    found = returned_trace_ids({"x-cloud-trace-context": f"{SENT.upper()}/123;o=1"}, sent_trace_id=SENT)
    assert found == [ReturnedTraceId("x-cloud-trace-context", SENT, False)]


def test_trailers_are_read_like_headers_and_invalid_values_are_skipped_with_a_warning() -> None:
    warnings: list[str] = []
    found = returned_trace_ids(
        {"traceresponse": "00-zz-b7ad6b7169203331-01"},
        {"traceresponse": f"00-{SENT}-b7ad6b7169203331-01"},
        warnings=warnings,
    )
    assert found == [ReturnedTraceId("traceresponse", SENT, True)]
    assert warnings and "traceparent" in warnings[0]


def test_a_response_without_trace_context_names_nothing() -> None:
    assert (
        returned_trace_ids({"content-type": "text/event-stream", "x-request-id": "chatcmpl-1"}, sent_trace_id=SENT)
        == []
    )


def test_the_sent_id_in_the_body_is_named_as_the_bodys() -> None:
    found = returned_trace_ids({}, sent_trace_id=SENT, body_trace_ids=[SENT])
    assert found == [ReturnedTraceId("body", SENT, False)]


def test_another_trace_the_body_states_is_authoritative() -> None:
    found = returned_trace_ids({}, sent_trace_id=SENT, body_trace_ids=[OTHER])
    assert found == [ReturnedTraceId("body", OTHER, True)]


def test_the_body_comes_after_the_headers() -> None:
    headers = {"traceresponse": f"00-{OTHER}-b7ad6b7169203331-01"}
    found = returned_trace_ids(headers, sent_trace_id=SENT, body_trace_ids=[SENT])
    assert [r.source for r in found] == ["traceresponse", "body"]
