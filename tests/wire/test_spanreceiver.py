"""The server-span receiver on a real socket: the OpenTelemetry SDK's own OTLP/HTTP exporter posts a server span to
it (as vLLM's does), and each request's span joins its timeline by the trace its ``traceparent`` named. Malformed
exports are refused with a 4xx and a warning; the receiver goes on."""

from __future__ import annotations

import asyncio
import gzip

import orjson
import pytest

from latscope.signals.join import ttft_split
from latscope.signals.serverspans import ServerSpan, SpanDecodeError, join_server_spans, span_measures, spans_from_json
from latscope.timeline.model import ServerPhase, Timeline
from latscope.wire.spanreceiver import SpanReceiver

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
#: vLLM's attributes of one request, in seconds (vllm/v1/engine/output_processor.py)
LATENCY = {
    "gen_ai.latency.time_to_first_token": 0.120,
    "gen_ai.latency.time_in_queue": 0.030,
    "gen_ai.latency.time_in_model_prefill": 0.050,
    "gen_ai.latency.time_in_model_decode": 0.200,
    "gen_ai.latency.time_in_model_inference": 0.250,
    "gen_ai.latency.e2e": 0.330,
}


def _export_with_the_sdk(url: str) -> None:
    """What vLLM does: a SERVER span named llm_request, child of the request's traceparent, exported over OTLP/HTTP."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    provider = TracerProvider(resource=Resource.create({"service.name": "vllm.llm"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, timeout=5)))
    context = TraceContextTextMapPropagator().extract({"traceparent": f"00-{TRACE}-{PARENT}-01"})
    tracer = provider.get_tracer("vllm")
    with tracer.start_as_current_span("llm_request", context=context, kind=SpanKind.SERVER, attributes=LATENCY):
        pass
    provider.shutdown()


async def test_the_sdks_exporter_delivers_a_span_that_joins_its_request() -> None:
    async with SpanReceiver(port=0) as receiver:
        await asyncio.get_running_loop().run_in_executor(None, _export_with_the_sdk, receiver.url)
        assert await receiver.wait_for([TRACE], 5.0), receiver.warnings
    (span,) = receiver.spans
    assert (span.name, span.trace_id, span.parent_span_id, span.service) == ("llm_request", TRACE, PARENT, "vllm.llm")
    t = Timeline(started_ns=0, send_end_ns=1_000_000, first_token_ns=150_000_000)
    t.trace_id, t.span_id = TRACE, PARENT
    assert join_server_spans([t, Timeline()], receiver.spans) == 1
    measures = {m.name: m.ms for m in t.server}
    assert measures[ServerPhase.QUEUE] == pytest.approx(30.0) and measures[ServerPhase.PREFILL] == pytest.approx(50.0)
    assert measures[ServerPhase.INGEST] == pytest.approx(40.0)  # 120 − 30 − 50: before the engine's queue
    split = ttft_split(t)
    assert split is not None and split.consistent and sum(p.ns for p in split.parts) == split.ttft_ns
    assert [p.name for p in split.parts][:4] == ["connection_send", "ingest", "queue", "prefill"]


async def _post(port: int, head: bytes, body: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head % len(body) + body)
    await writer.drain()
    answer = await reader.read(65536)
    writer.close()
    return answer


POST = b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: %s\r\ncontent-length: %%d\r\n%s\r\n"


async def test_otlp_json_gzip_is_read_and_nonsense_refused_without_stopping_the_receiver() -> None:
    export = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": TRACE.upper(),
                                "spanId": "1111111111111111",
                                "parentSpanId": PARENT,
                                "name": "llm_request",
                                "startTimeUnixNano": "1000",
                                "endTimeUnixNano": "2000",
                                "attributes": [{"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.5}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    async with SpanReceiver(port=0) as receiver:
        json_head = POST % (b"application/json", b"content-encoding: gzip\r\n")
        answer = await _post(receiver.port, json_head, gzip.compress(orjson.dumps(export)))
        assert answer.startswith(b"HTTP/1.1 200"), answer
        bad = await _post(receiver.port, POST % (b"application/x-protobuf", b""), b"\xff\xff\xff not protobuf")
        assert bad.startswith(b"HTTP/1.1 400"), bad
        assert (await _post(receiver.port, b"GET /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n", b""))[
            :12
        ] == b"HTTP/1.1 404"
        garbage = await _post(receiver.port, b"\x00\x01 nonsense %d\r\n\r\n", b"")
        assert garbage.startswith(b"HTTP/1.1 400") or garbage == b""
        again = await _post(receiver.port, json_head, gzip.compress(orjson.dumps(export)))
        assert again.startswith(b"HTTP/1.1 200")  # still serving
    assert [s.trace_id for s in receiver.spans] == [TRACE, TRACE]
    assert any("refused" in w for w in receiver.warnings)


def test_json_spans_name_the_field_that_does_not_fit() -> None:
    with pytest.raises(SpanDecodeError, match=r"spans\[0\]"):
        spans_from_json({"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "1"}]}]}]})


def test_a_span_without_latency_attributes_gives_no_measure() -> None:
    span = ServerSpan(TRACE, "1" * 16, PARENT, "http", 0, 1, {"http.route": "/v1/chat/completions"})
    assert span_measures(span) == []
    odd = ServerSpan(TRACE, "1" * 16, PARENT, "llm_request", 0, 1, {"gen_ai.latency.time_in_queue": "soon"})
    assert span_measures(odd) == []
