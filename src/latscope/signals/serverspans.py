"""A server's own trace spans of each request (OpenTelemetry, OTLP), joined to the request that carried their trace.

An engine that exports traces turns each request's W3C ``traceparent`` into the trace and parent of its own span:
vLLM (``--otlp-traces-endpoint``) sends one ``llm_request`` span (kind SERVER) per request, whose ``gen_ai.latency.*``
attributes are its own account of that request, in seconds (vllm/v1/engine/output_processor.py, ``do_tracing``):

=====================================  ==========================================================  ==============
attribute                              what vLLM measured                                          measure
=====================================  ==========================================================  ==============
``time_to_first_token``                arrival in the API server → first token                     (``ingest``)
``time_in_queue``                      queued in the engine → scheduled                            ``queue``
``time_in_model_prefill``              scheduled → first token                                     ``prefill``
``time_in_model_decode``               first → last token                                          ``decode``
``time_in_model_inference``            scheduled → last token                                      ``inference``
``e2e``                                arrival in the API server → finished                        ``e2e``
=====================================  ==========================================================  ==============

``ingest`` is derived: time to first token − queue − prefill, the time from the request's arrival in vLLM's API
server to its engine's queue (input processing, tokenising, and the engine step running when it came, which the
engine's own timestamps do not see). Each measure's source names the attribute (``span:gen_ai.latency.time_in_queue``).

Sans-IO: bytes or decoded JSON in, :class:`ServerSpan` records out. OTLP/HTTP protobuf needs ``opentelemetry-proto``
(the ``otel`` extra); OTLP/JSON needs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from latscope.timeline.model import ServerMeasure, ServerPhase, Timeline

MS_PER_S = 1000.0
GEN_AI_LATENCY = "gen_ai.latency."

#: ``gen_ai.latency.<name>`` → the measure it becomes.
SPAN_PHASES: dict[str, str] = {
    "time_in_queue": ServerPhase.QUEUE,
    "time_in_model_prefill": ServerPhase.PREFILL,
    "time_in_model_decode": ServerPhase.DECODE,
    "time_in_model_inference": "inference",  # prefill + decode: the server's own name, as TGI's
    "e2e": ServerPhase.E2E,
}

#: Where ``Timeline.server_fields`` keeps the joined span (name, ids, times and attributes).
SPAN_FIELD = "server_span"


class SpanDecodeError(ValueError):
    """An OTLP body that is not an export request; the message says where it broke."""


@dataclass(frozen=True, slots=True)
class ServerSpan:
    """One span a server exported. Ids are lower-case hex (trace 32 digits, span 16); times in ns since the epoch."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, object] = field(default_factory=dict)
    service: str | None = None  #: the resource's ``service.name``

    def to_dict(self) -> dict[str, object]:
        """The JSON form kept on a timeline (``server_fields["server_span"]``)."""
        return {
            "name": self.name,
            "service": self.service,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "attributes": dict(self.attributes),
        }


def spans_from_protobuf(body: bytes) -> list[ServerSpan]:
    """The spans of an OTLP/HTTP protobuf ``ExportTraceServiceRequest``. Raises :class:`SpanDecodeError` for bytes
    that are not one, and :class:`ImportError` (naming the extra) without ``opentelemetry-proto``."""
    try:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError as exc:  # pragma: no cover - the test extra has it
        raise ImportError("reading OTLP protobuf needs opentelemetry-proto: pip install 'latscope[otel]'") from exc
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise SpanDecodeError(f"not an OTLP ExportTraceServiceRequest ({len(body)} bytes): {exc}") from None
    out: list[ServerSpan] = []
    for resource_spans in request.resource_spans:
        service = _service((kv.key, _any_value_pb(kv.value)) for kv in resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ServerSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: _any_value_pb(kv.value) for kv in span.attributes},
                        service=service,
                    )
                )
    return out


def _any_value_pb(value: Any) -> object:
    """A protobuf ``AnyValue``'s scalar (string, bool, int, double); None for arrays, maps, bytes or nothing."""
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind in ("string_value", "bool_value", "int_value", "double_value") else None


def spans_from_json(obj: Mapping[str, Any]) -> list[ServerSpan]:
    """The spans of an OTLP/JSON export request (``resourceSpans`` → ``scopeSpans`` → ``spans``; ids in hex, times
    as decimal strings, attribute values as ``{"doubleValue": …}``). Raises :class:`SpanDecodeError` naming the field
    that does not fit."""
    out: list[ServerSpan] = []
    try:
        for r, resource_spans in enumerate(obj.get("resourceSpans") or []):
            resource = resource_spans.get("resource") or {}
            service = _service(_json_attributes(resource.get("attributes") or []))
            for s, scope_spans in enumerate(resource_spans.get("scopeSpans") or []):
                for n, span in enumerate(scope_spans.get("spans") or []):
                    where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                    out.append(_json_span(span, where, service))
    except (AttributeError, TypeError) as exc:
        raise SpanDecodeError(f"not an OTLP/JSON export request: {exc}") from None
    return out


def _json_span(span: Mapping[str, Any], where: str, service: str | None) -> ServerSpan:
    try:
        return ServerSpan(
            trace_id=str(span["traceId"]).lower(),
            span_id=str(span["spanId"]).lower(),
            parent_span_id=str(span.get("parentSpanId") or "").lower(),
            name=str(span.get("name") or ""),
            start_ns=int(span["startTimeUnixNano"]),
            end_ns=int(span["endTimeUnixNano"]),
            attributes=dict(_json_attributes(span.get("attributes") or [])),
            service=service,
        )
    except (KeyError, ValueError) as exc:
        raise SpanDecodeError(f"{where}: {exc!r}") from None


def _json_attributes(items: Iterable[Mapping[str, Any]]) -> Iterable[tuple[str, object]]:
    for item in items:
        value = item.get("value") or {}
        for kind in ("doubleValue", "intValue", "stringValue", "boolValue"):
            if kind in value:
                raw = value[kind]
                yield str(item.get("key")), int(raw) if kind == "intValue" else raw
                break


def _service(attributes: Iterable[tuple[str, object]]) -> str | None:
    for key, value in attributes:
        if key == "service.name" and isinstance(value, str):
            return value
    return None


def _seconds(attributes: Mapping[str, object], name: str) -> float | None:
    value = attributes.get(GEN_AI_LATENCY + name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def span_measures(span: ServerSpan) -> list[ServerMeasure]:
    """The server measures of one span's ``gen_ai.latency.*`` attributes, in ms (see the module's table); ``ingest``
    when its time to first token, queue and prefill are all there and the first covers the other two."""
    measures: list[ServerMeasure] = []
    ttft = _seconds(span.attributes, "time_to_first_token")
    queue = _seconds(span.attributes, "time_in_queue")
    prefill = _seconds(span.attributes, "time_in_model_prefill")
    if ttft is not None and queue is not None and prefill is not None and ttft >= queue + prefill:
        source = "span:gen_ai.latency.time_to_first_token-time_in_queue-time_in_model_prefill"
        measures.append(ServerMeasure(ServerPhase.INGEST, (ttft - queue - prefill) * MS_PER_S, source))
    for name, phase in SPAN_PHASES.items():
        seconds = _seconds(span.attributes, name)
        if seconds is not None:
            measures.append(ServerMeasure(phase, seconds * MS_PER_S, f"span:{GEN_AI_LATENCY}{name}"))
    return measures


def join_server_spans(timelines: Iterable[Timeline], spans: Iterable[ServerSpan]) -> int:
    """Add to each timeline that sent a ``traceparent`` (``trace_id``) the measures of the server span of its trace
    (the one whose parent is the request's own span id where several share the trace; SERVER spans carry the
    ``gen_ai.latency`` attributes), and keep the span in ``server_fields["server_span"]``. Returns how many
    timelines got one. A measure already on a timeline with the same name and source is not added twice."""
    by_trace: dict[str, list[ServerSpan]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    joined = 0
    for t in timelines:
        candidates = by_trace.get(t.trace_id or "", [])
        if not candidates:
            continue
        span = next((c for c in candidates if t.span_id and c.parent_span_id == t.span_id), candidates[0])
        existing = {(m.name, m.source) for m in t.server}
        t.server.extend(m for m in span_measures(span) if (m.name, m.source) not in existing)
        t.server_fields[SPAN_FIELD] = span.to_dict()
        joined += 1
    return joined
