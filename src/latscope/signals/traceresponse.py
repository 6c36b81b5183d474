"""Which trace a server says it recorded a request under: the trace ids a response names.

A client that sent a ``traceparent`` learns whether it was propagated from what comes back:

* ``traceresponse`` (W3C Trace Context Level 2, https://www.w3.org/TR/trace-context-2/#traceresponse-header): the
  same format as ``traceparent``, naming the trace the server's span belongs to. Authoritative.
* ``Server-Timing`` with a metric named ``traceparent`` (or ``traceresponse``) whose ``desc`` is one (the convention
  of several APM agents, which expose the server's trace to browsers this way). Authoritative.
* The same ``traceresponse`` passed on by a gateway that renames its upstream's response headers: LiteLLM's proxy
  sends them on prefixed with ``llm_provider-`` (``llm_provider-traceresponse``), so the upstream's trace is still
  named, under that name. Authoritative: it states the trace the upstream recorded the request under.
* A request-id style header (``x-request-id``, ``x-trace-id``, ``x-cloud-trace-context`` …) that *contains* the sent
  trace id: the server used it. Such headers are not trace ids by contract, so one that does not contain the sent id
  says nothing (a random request id is not "a different trace").

* The body (``body``): the trace ids the client found in the body's first bytes
  (:attr:`~latscope.timeline.model.Timeline.body_trace_ids`). The sent trace id anywhere in them means the server
  used it (an echoed ``traceparent``, a ``trace_id`` member, a request id built from it); any other id there was in a
  ``traceparent``-shaped value or a ``trace_id`` member, which states a trace, so it is authoritative.

Every header source is read from the header section and the trailer section alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from latscope.signals.headers import HeaderInput, header_pairs, header_values, upstream_names
from latscope.signals.requestid import REQUEST_ID_HEADERS
from latscope.signals.servertiming import parse_server_timing
from latscope.signals.tracecontext import parse_traceparent

#: Server-Timing metric names that carry a ``traceparent`` value in ``desc``.
SERVER_TIMING_TRACE_NAMES = frozenset({"traceparent", "traceresponse"})
#: Headers whose value is a ``traceresponse``: the server's own, then an upstream's passed on by a gateway.
TRACERESPONSE_HEADERS = ("traceresponse", *upstream_names("traceresponse"))
#: The ``source`` of a trace id found in the response body.
BODY_SOURCE = "body"
#: Headers that may contain the trace id the server used (read only for the sent id itself).
ID_HEADERS = (*REQUEST_ID_HEADERS, "x-trace-id", "trace-id", "x-b3-traceid", "uber-trace-id")


@dataclass(frozen=True, slots=True)
class ReturnedTraceId:
    """A trace id a response names.

    ``source`` is where it was found (``traceresponse``, ``server-timing``, a header name or ``body``); ``trace_id``
    32 lower-case hex digits; ``authoritative`` True when the source is a W3C trace context value or a body's trace
    id (it names the server's trace, so a different id means the sent one was not used), False for a header that
    merely contains the sent id.
    """

    source: str
    trace_id: str
    authoritative: bool


def returned_trace_ids(
    headers: HeaderInput,
    trailers: HeaderInput = (),
    *,
    sent_trace_id: str | None = None,
    body_trace_ids: Sequence[str] = (),
    warnings: list[str] | None = None,
) -> list[ReturnedTraceId]:
    """Every trace id the response names (see the module docstring), in the order: ``traceresponse`` (the server's,
    then an upstream's a gateway passed on), Server-Timing, id headers containing ``sent_trace_id``, then the ids
    the body named (``body_trace_ids``, :attr:`~latscope.timeline.model.Timeline.body_trace_ids`)."""
    sections = [header_pairs(headers), header_pairs(trailers)]
    found: list[ReturnedTraceId] = []
    for name in TRACERESPONSE_HEADERS:
        for section in sections:
            for value in header_values(section, name):
                parsed = parse_traceparent(value, warnings=warnings)
                if parsed is not None:
                    found.append(ReturnedTraceId(name, parsed.trace_id, True))
    for metric in parse_server_timing(sections[0], sections[1], warnings=warnings):
        if metric.name.lower() in SERVER_TIMING_TRACE_NAMES and metric.desc:
            parsed = parse_traceparent(metric.desc, warnings=warnings)
            if parsed is not None:
                found.append(ReturnedTraceId("server-timing", parsed.trace_id, True))
    if sent_trace_id:
        wanted = sent_trace_id.lower()
        for section in sections:
            for name, value in section:
                if name in ID_HEADERS and wanted in value.lower():
                    found.append(ReturnedTraceId(name, wanted, False))
    sent = (sent_trace_id or "").lower()
    for trace_id in body_trace_ids:
        found.append(ReturnedTraceId(BODY_SOURCE, trace_id.lower(), trace_id.lower() != sent))
    return found
