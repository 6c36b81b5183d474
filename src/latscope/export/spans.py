"""Timelines → spans: one span per request, a child span per phase. Pure: no I/O, no OpenTelemetry import.

The request span
    ``{operation} {model}`` (``chat llama``: the GenAI semantic conventions' span name), kind CLIENT, from
    ``started_ns`` to the end of the request (``ended_ns``, else the error's moment, else the last mark). Its context
    is the ``traceparent`` latscope sent on the wire: the same trace id and, as span id, the header's parent-id
    (:attr:`Timeline.span_id`). A server that continues that trace context hangs its own spans under this one.
    When the caller set the ``traceparent`` itself (``-H traceparent:…``), its parent-id names the caller's span:
    the request span then becomes that span's child, with an id of its own. Without trace context on the wire
    (``--no-trace-context``) the ids are derived from the request (a hash: the same timeline gives the same spans).

The phase spans
    ``retry`` (a request sent again under a retry policy: its earlier attempts and the waits after them, from its
    first attempt's start, where the request span then starts too), ``pool``, ``dns``, ``connect``, ``tls``,
    ``send``, ``wait``, ``first token``, ``stream`` (those the request went through), kind INTERNAL, children of the
    request span. They partition it: each phase runs from its own start
    mark to the next phase's start (the last to the request's end), so their durations add up to the request span's
    exactly, in integer nanoseconds. The client's own microseconds between two phases (a fresh connection handed to
    the request before it starts sending) count in the earlier phase; ``latscope.phase_ms`` of ``dns``, ``connect``,
    ``tls`` and ``send`` is the phase's own measured duration (:mod:`latscope.timeline.metrics`).

The server's phases
    ``server ingest``, ``server queue``, ``server prefill``, ``server decode``: where the server's own span of the
    request was joined (``--server-spans``: vLLM's ``llm_request``, :mod:`latscope.signals.serverspans`), its account
    as children of the request span, kind INTERNAL, one after another from the server span's start (arrival in its
    API server → its engine's queue → scheduled → first token → last token), each as long as the server measured it,
    as far as the server reported the chain. They are placed by the *server's* clock (``latscope.clock``: ``server``):
    on another host they may sit off the client's phases by the two clocks' offset; their durations are the server's.

Errors
    A failed request's span and the phase span of the phase that failed (``headers``: ``wait``, the wait for the
    response head; ``stream``, or a phase the request never reached: the last one) have status ERROR with
    ``"<phase>: <message>"`` (the phase as :class:`~latscope.timeline.model.Phase` names it; messages are already
    scrubbed of credentials, and scrubbed again here) and ``error.type`` is the
    :class:`~latscope.timeline.model.ErrorKind`. A request sent again after a kept-alive
    connection turned out closed carries a ``latscope.stale_retry`` event at the first attempt's failure (the
    timeline keeps that attempt's error, not its marks).

Time
    Marks are monotonic ns; spans carry wall-clock ns since the Unix epoch, ``mark + clock_offset_ns`` with one
    offset for every mark (:func:`latscope.export.otlp.measure_clock_offset`), so durations stay exact differences
    of marks and only the placement on the wall clock carries the offset's uncertainty.

Attributes follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``), with ``server.*``, ``network.*``,
``http.*`` and ``url.full`` from the general ones, and latscope's own measurements under ``latscope.*`` (milliseconds,
float, in the name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from latscope.signals.serverspans import SPAN_FIELD
from latscope.timeline import metrics
from latscope.timeline.model import (
    Attempt,
    ConnectionInfo,
    ErrorKind,
    Phase,
    RequestError,
    ServerMeasure,
    ServerPhase,
    Timeline,
    Usage,
)
from latscope.timeline.redact import redact_url, scrub
from latscope.units import NS_PER_MS

#: A span attribute's value: what OTLP's AnyValue carries and the SDK accepts.
AttributeValue = str | bool | int | float | tuple[str, ...]

#: The phase spans, in request order, each with the mark it starts at.
PHASE_STARTS: tuple[tuple[str, str], ...] = (
    ("pool", "started_ns"),
    ("dns", "dns_start_ns"),
    ("connect", "connect_start_ns"),
    ("tls", "tls_start_ns"),
    ("send", "send_start_ns"),
    ("wait", "send_end_ns"),
    ("first token", "first_byte_ns"),
    ("stream", "first_token_ns"),
)

#: ``gen_ai.operation.name`` per dialect (the GenAI conventions' well-known values).
_OPERATIONS = {
    "openai.chat": "chat",
    "openai.completions": "text_completion",
    "ollama.chat": "chat",
    "ollama.generate": "text_completion",
}
#: ``gen_ai.provider.name`` (and the older ``gen_ai.system``) per dialect family: the API the request speaks, which
#: is what latscope knows (an OpenAI-compatible server may be vLLM or llama.cpp behind it).
_PROVIDERS = {"openai": "openai", "ollama": "ollama"}

_ZERO_SPAN = "0" * 16

#: The server's phases of its own span, in the order they follow one another (see the module docstring).
SERVER_SPAN_PHASES: tuple[str, ...] = (ServerPhase.INGEST, ServerPhase.QUEUE, ServerPhase.PREFILL, ServerPhase.DECODE)


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A point in time on a span: ``at_ns`` is wall-clock ns since the Unix epoch."""

    name: str
    at_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Span:
    """One span, ready for an exporter. Ids are lower-case hex (trace id 32 digits, span ids 16); ``start_ns`` and
    ``end_ns`` are wall-clock ns since the Unix epoch; ``kind`` is "client" or "internal"; ``error`` is the status
    description of a span with status ERROR, None for status UNSET."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    kind: str
    attributes: Mapping[str, AttributeValue]
    error: str | None = None
    events: tuple[SpanEvent, ...] = ()

    @property
    def duration_ns(self) -> int:
        """end − start, ns."""
        return self.end_ns - self.start_ns


def _derived_id(digits: int, *parts: object) -> str:
    """A non-zero hex id of ``digits`` digits derived from ``parts`` (BLAKE2b): the same input, the same id."""
    seed = "\x1f".join(str(p) for p in parts).encode()
    for salt in range(1000):
        value = hashlib.blake2b(seed, digest_size=digits // 2, salt=salt.to_bytes(16, "little")).hexdigest()
        if value != "0" * digits:
            return value
    raise AssertionError("unreachable: a thousand zero hashes")  # pragma: no cover


def _caller_parent(t: Timeline) -> str | None:
    """The parent-id of a ``traceparent`` the caller set (the one the timeline's headers hold), or None."""
    value = t.request_headers.get("traceparent")
    if value is None:
        return None
    parts = value.strip().split("-")
    if len(parts) != 4 or len(parts[2]) != 16 or parts[2] == _ZERO_SPAN:
        return None
    return parts[2].lower()


def request_context(t: Timeline) -> tuple[str, str, str | None]:
    """``(trace id, span id, parent span id)`` of ``t``'s request span (see the module docstring)."""
    if t.trace_id is not None and t.span_id is not None:
        return t.trace_id, t.span_id, None
    if t.trace_id is not None:
        parent = _caller_parent(t)
        return t.trace_id, _derived_id(16, t.trace_id, parent, t.started_ns, t.label), parent
    trace_id = _derived_id(32, t.url, t.started_ns, t.label)
    return trace_id, _derived_id(16, trace_id), None


def _end_ns(t: Timeline) -> int:
    """Where the request span ends: the response's end, else the failure's moment, else the latest mark."""
    if t.ended_ns is not None:
        return t.ended_ns
    if t.error is not None:
        return t.error.at_ns
    marks: list[int | None] = [getattr(t, mark) for _, mark in PHASE_STARTS]
    return max([t.started_ns, *(m for m in marks if m is not None), t.last_token_ns or 0])


def phase_bounds(t: Timeline) -> list[tuple[str, int, int]]:
    """``(phase, start_ns, end_ns)`` in monotonic ns, partitioning ``started_ns`` … the request's end: each phase
    from its start mark to the next phase's (a mark earlier than the one before it is skipped). A phase may last
    0 ns: a first token that came in the read that carried the response head."""
    end = _end_ns(t)
    starts: list[tuple[str, int]] = [("retry", t.logical_started_ns)] if t.retries else []
    for name, mark in PHASE_STARTS:
        at = getattr(t, mark)
        if at is None or at > end or (starts and at < starts[-1][1]):
            continue
        starts.append((name, at))
    bounds: list[tuple[str, int, int]] = []
    for (name, at), nxt in zip(starts, [*starts[1:], ("", end)], strict=True):
        bounds.append((name, at, nxt[1]))
    return bounds


def _server_address(url: str) -> tuple[str | None, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None, None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname, port


def _put(attributes: dict[str, AttributeValue], name: str, value: AttributeValue | None) -> None:
    if value is not None:
        attributes[name] = value


def _connection_attributes(attributes: dict[str, AttributeValue], info: ConnectionInfo | None) -> None:
    if info is None:
        return
    _put(attributes, "network.peer.address", info.remote_address)
    _put(attributes, "network.peer.port", info.remote_port)
    if info.http_version is not None:
        attributes["network.protocol.name"] = "http"
        attributes["network.protocol.version"] = info.http_version.removeprefix("HTTP/")
    if info.tls_version is not None:
        attributes["tls.protocol.version"] = info.tls_version.removeprefix("TLSv")
        _put(attributes, "tls.resumed", info.tls_session_resumed)
    attributes["latscope.connection.id"] = info.connection_id
    attributes["latscope.connection.reused"] = info.reused


def _usage_attributes(attributes: dict[str, AttributeValue], t: Timeline, usage: Usage | None) -> None:
    if usage is not None and usage.prompt_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens
    if t.first_token_ns is not None or (usage is not None and usage.completion_tokens is not None):
        attributes["gen_ai.usage.output_tokens"] = metrics.output_tokens(t)
        counted = usage is None or usage.completion_tokens is None
        attributes["latscope.output_tokens_source"] = "counted" if counted else "usage"
    if usage is not None and usage.cached_tokens is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_tokens
    if usage is not None and usage.reasoning_tokens is not None:
        attributes["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens


def request_attributes(t: Timeline) -> dict[str, AttributeValue]:
    """The request span's attributes (``gen_ai.request.max_tokens`` is the timeline's ``max_tokens``, what the
    request asked for)."""
    dialect = t.dialect or ""
    family = dialect.split(".")[0]
    attributes: dict[str, AttributeValue] = {}
    _put(attributes, "gen_ai.operation.name", _OPERATIONS.get(dialect))
    provider = _PROVIDERS.get(family)
    _put(attributes, "gen_ai.provider.name", provider)
    _put(attributes, "gen_ai.system", provider)
    _put(attributes, "gen_ai.request.model", t.model)
    _put(attributes, "gen_ai.request.max_tokens", t.max_tokens)
    if t.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (t.finish_reason,)
    _usage_attributes(attributes, t, t.usage)
    url = redact_url(t.url)
    host, port = _server_address(url)
    _put(attributes, "server.address", host)
    _put(attributes, "server.port", port)
    attributes["url.full"] = url
    attributes["http.request.method"] = t.method
    _put(attributes, "http.response.status_code", t.status)
    _connection_attributes(attributes, t.connection)
    _put(attributes, "latscope.dialect", t.dialect)
    _put(attributes, "latscope.label", t.label)
    for name, value in (
        ("latscope.client_queue_ms", metrics.client_queue_ms(t)),
        ("latscope.ttfb_ms", metrics.ttfb_ms(t)),
        ("latscope.ttft_ms", metrics.ttft_ms(t)),
        ("latscope.tpot_ms", metrics.tpot_ms(t)),
        ("latscope.e2e_ms", metrics.e2e_ms(t)),
    ):
        _put(attributes, name, value)
    if t.retries:
        attributes["latscope.attempts"] = t.attempt
        attributes["latscope.retry_ms"] = metrics.retry_ms(t)
    _put(attributes, "latscope.idempotency_key", t.idempotency_key)
    gaps = metrics.itl_ms(t)
    if gaps:
        ordered = sorted(gaps)
        attributes["latscope.itl_count"] = len(gaps)
        attributes["latscope.itl_p50_ms"] = ordered[(len(ordered) - 1) // 2]
        attributes["latscope.itl_max_ms"] = ordered[-1]
    attributes["latscope.events"] = len(t.events)
    attributes["latscope.reads"] = len(t.reads)
    _server_attributes(attributes, t.server)
    if t.error is not None:
        attributes["error.type"] = str(t.error.kind)
        attributes["latscope.error.phase"] = str(t.error.phase)
    if t.stale_retry_error is not None:
        attributes["latscope.stale_retry"] = True
    return attributes


def _server_attributes(attributes: dict[str, AttributeValue], measures: Sequence[ServerMeasure]) -> None:
    """What the server reported about itself, ``latscope.server.<phase>_ms`` (the first measure of each name)."""
    for m in measures:
        name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in m.name.lower())
        attributes.setdefault(f"latscope.server.{name}_ms", m.ms)


def _error_text(err: RequestError) -> str:
    return scrub(f"{err.phase}: {err.message}")


#: The phase span an error of each :class:`Phase` belongs to (``headers``: waiting for the response head).
_ERROR_SPAN = {
    Phase.POOL: "pool",
    Phase.DNS: "dns",
    Phase.CONNECT: "connect",
    Phase.TLS: "tls",
    Phase.SEND: "send",
    Phase.HEADERS: "wait",
}


def _failed_phase(err: RequestError | None, names: list[str]) -> str | None:
    """The phase span that gets an error's status: the one its phase names when the request went through it, else
    (and for ``stream``) the last one."""
    if err is None or not names:
        return None
    named = _ERROR_SPAN.get(err.phase)
    return named if named in names else names[-1]


_OWN_DURATION = {"dns": metrics.dns_ms, "connect": metrics.connect_ms, "tls": metrics.tls_ms, "send": metrics.send_ms}


def timeline_spans(t: Timeline, *, clock_offset_ns: int) -> list[Span]:
    """The request span of ``t`` (first) and its phase spans, in order. ``clock_offset_ns`` is added to every
    monotonic mark to place it on the wall clock (ns since the Unix epoch)."""
    trace_id, span_id, parent = request_context(t)
    end = _end_ns(t)
    error = None if t.error is None else _error_text(t.error)
    events: list[SpanEvent] = []
    if t.stale_retry_error is not None:
        first = t.stale_retry_error
        events.append(
            SpanEvent(
                "latscope.stale_retry",
                first.at_ns + clock_offset_ns,
                {
                    "latscope.error.phase": str(first.phase),
                    "error.type": str(first.kind),
                    "message": _error_text(first),
                },
            )
        )
    model = t.model or ""
    operation = _OPERATIONS.get(t.dialect or "", "request")
    spans = [
        Span(
            name=f"{operation} {model}".strip(),
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            start_ns=t.logical_started_ns + clock_offset_ns,
            end_ns=end + clock_offset_ns,
            kind="client",
            attributes=request_attributes(t),
            error=error,
            events=tuple(events),
        )
    ]
    bounds = phase_bounds(t)
    failed = _failed_phase(t.error, [name for name, _, _ in bounds])
    for name, start, stop in bounds:
        attributes: dict[str, AttributeValue] = {"latscope.phase": name}
        own = _OWN_DURATION.get(name)
        measured = own(t) if own is not None else None
        attributes["latscope.phase_ms"] = measured if measured is not None else (stop - start) / NS_PER_MS
        spans.append(
            Span(
                name=name,
                trace_id=trace_id,
                span_id=_derived_id(16, span_id, name),
                parent_span_id=span_id,
                start_ns=start + clock_offset_ns,
                end_ns=stop + clock_offset_ns,
                kind="internal",
                attributes=attributes,
                error=error if name == failed else None,
            )
        )
    return spans + server_phase_spans(t, trace_id, span_id)


def server_phase_spans(t: Timeline, trace_id: str, parent_span_id: str) -> list[Span]:
    """The server's own phases of ``t`` as children of its request span ``parent_span_id`` (see the module
    docstring); [] where no server span was joined."""
    joined = t.server_fields.get(SPAN_FIELD)
    start = joined.get("start_ns") if isinstance(joined, dict) else None
    if not isinstance(start, int) or isinstance(start, bool):
        return []
    reported = {m.name: m for m in t.server if m.source.startswith("span:")}
    spans: list[Span] = []
    at = start
    for phase in SERVER_SPAN_PHASES:
        measure = reported.get(phase)
        if measure is None:
            break  # the chain is placed only as far as the server measured it
        end = at + round(measure.ms * NS_PER_MS)
        attributes: dict[str, AttributeValue] = {
            "latscope.server_phase": phase,
            "latscope.phase_ms": measure.ms,
            "latscope.source": measure.source,
            "latscope.clock": "server",
        }
        name = f"server {phase}"
        spans.append(
            Span(name, trace_id, _derived_id(16, parent_span_id, name), parent_span_id, at, end, "internal", attributes)
        )
        at = end
    return spans


def spans_of(timelines: Iterable[Timeline], *, clock_offset_ns: int) -> list[Span]:
    """:func:`timeline_spans` of every timeline, in order."""
    out: list[Span] = []
    for t in timelines:
        out += timeline_spans(t, clock_offset_ns=clock_offset_ns)
    return out


# -- bench rows ----------------------------------------------------------------------------------------------------


def _ns(row: Mapping[str, Any], name: str) -> int | None:
    """A ``*_ms`` column of a requests row back in integer ns (exact: the column is an ns difference ÷ 1e6 in
    float64, which round-trips any duration under about 100 days)."""
    value = row.get(name)
    if value is None or value != value:  # NULL or NaN
        return None
    return round(float(value) * NS_PER_MS)


def _attempts_from_row(row: Mapping[str, Any], start_ns: int) -> list[Attempt]:
    """The earlier attempts a row lists (``retried``), placed from the row's ``started_ns`` (its first attempt's)."""
    origin_ms = row.get("started_at_ms")
    if origin_ms is None or origin_ms != origin_ms:
        return []
    out: list[Attempt] = []
    for a in row.get("retried") or []:
        began, ended = _ns(a, "started_at_ms"), _ns(a, "ended_at_ms")
        if began is None or ended is None:
            continue
        base = start_ns - round(float(origin_ms) * NS_PER_MS)
        out.append(
            Attempt(
                number=int(a.get("attempt") or len(out) + 1),
                started_ns=base + began,
                ended_ns=base + ended,
                status=a.get("status"),
                error=None,
                tokens=int(a.get("tokens") or 0),
                retry_after_ms=a.get("retry_after_ms"),
                should_retry=a.get("should_retry"),
                wait_ns=_ns(a, "wait_ms") or 0,
            )
        )
    return out


def timeline_from_request_row(row: Mapping[str, Any], *, url: str, model: str | None, dialect: str | None) -> Timeline:
    """A :class:`Timeline` with the marks a bench run's ``requests.parquet`` row keeps (see
    :data:`latscope.runs.records.REQUEST_SCHEMA`): ``started_ns`` as stored, the others placed from it by the stored
    durations. The setup phases (pool, dns, connect, tls) are laid end to end from the start, since the row keeps
    their durations, not their starts; the later marks come from the TTFB, wait, send, TTFT and E2E columns. No
    reads or events: :func:`row_spans` takes the counts and ITL statistics from the row's columns."""
    t = Timeline(url=url, model=model, dialect=dialect, label=row.get("class"))
    # a retried request's row starts at its first attempt, and its times to the head, the first token and the end
    # run from there; its setup phases are its last attempt's, which started after the retries
    start = int(row["started_ns"])
    t.started_ns = start + (_ns(row, "retry_ms") or 0)
    t.retries = _attempts_from_row(row, start)
    t.idempotency_key = row.get("idempotency_key")
    t.trace_id = row.get("trace_id")
    t.span_id = row.get("span_id")
    t.max_tokens = row.get("max_tokens")
    at = t.started_ns + (_ns(row, "pool_ms") or 0)
    for phase in ("dns", "connect", "tls"):
        took = _ns(row, f"{phase}_ms")
        if took is not None:
            setattr(t, f"{phase}_start_ns", at)
            setattr(t, f"{phase}_end_ns", at + took)
            at += took
    setup = _ns(row, "setup_ms")
    if setup is not None:
        t.connection_ready_ns = t.started_ns + setup
    ttfb, wait, send = _ns(row, "ttfb_ms"), _ns(row, "wait_ms"), _ns(row, "send_ms")
    if ttfb is not None:
        t.first_byte_ns = start + ttfb
        if wait is not None:
            t.send_end_ns = t.first_byte_ns - wait
            if send is not None:
                t.send_start_ns = t.send_end_ns - send
    ttft = _ns(row, "ttft_ms")
    if ttft is not None:
        t.first_token_ns = start + ttft
    e2e = _ns(row, "e2e_ms")
    if e2e is not None:
        t.ended_ns = start + e2e
    t.status = row.get("status")
    t.finish_reason = row.get("finish_reason")
    if row.get("connection_id") is not None:
        version = row.get("http_version")
        t.connection = ConnectionInfo(
            connection_id=int(row["connection_id"]), reused=bool(row.get("reused")), http_version=version
        )
    prompt = row.get("prompt_tokens") if row.get("prompt_tokens_source") == "usage" else None
    output = row.get("output_tokens") if row.get("output_tokens_source") == "usage" else None
    if prompt is not None or output is not None:
        t.usage = Usage(prompt_tokens=prompt, completion_tokens=output)
    for column, value in row.items():
        if column.startswith("server_") and column.endswith("_ms") and value is not None and value == value:
            t.server.append(ServerMeasure(column[len("server_") : -len("_ms")], float(value), "requests.parquet"))
    if not row.get("ok", True) and row.get("error_phase") is not None:
        ended = t.ended_ns if t.ended_ns is not None else _end_ns(t)
        t.error = RequestError(
            Phase(row["error_phase"]),
            ErrorKind(row["error_kind"]),
            row.get("error_message") or "",
            ended,
            row.get("error_status"),
        )
    return t


def row_spans(
    row: Mapping[str, Any], *, url: str, model: str | None, dialect: str | None, clock_offset_ns: int
) -> list[Span]:
    """The spans of one ``requests.parquet`` row: :func:`timeline_spans` of :func:`timeline_from_request_row`, with
    the row's own token counts, TPOT and ITL statistics (the row keeps no events to count them from)."""
    t = timeline_from_request_row(row, url=url, model=model, dialect=dialect)
    spans = timeline_spans(t, clock_offset_ns=clock_offset_ns)
    head = spans[0]
    attributes = dict(head.attributes)
    for key in ("latscope.events", "latscope.reads"):
        attributes.pop(key, None)
    extra: dict[str, AttributeValue | None] = {
        "gen_ai.usage.input_tokens": row.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": row.get("output_tokens"),
        "latscope.output_tokens_source": row.get("output_tokens_source"),
        "latscope.tpot_ms": row.get("tpot_ms"),
        "latscope.itl_count": row.get("itl_count"),
        "latscope.itl_p50_ms": row.get("itl_p50_ms"),
        "latscope.itl_max_ms": row.get("itl_max_ms"),
        "latscope.events": row.get("events"),
        "latscope.reads": row.get("reads"),
        "latscope.bench.step": row.get("step"),
        "latscope.bench.request_id": row.get("request_id"),
        "latscope.bench.warmup": row.get("warmup"),
    }
    for key, value in extra.items():
        if value is not None and value == value:
            attributes[key] = value
    if row.get("prompt_tokens_source") == "planned":
        attributes["latscope.input_tokens_source"] = "planned"
    spans[0] = Span(
        head.name,
        head.trace_id,
        head.span_id,
        head.parent_span_id,
        head.start_ns,
        head.end_ns,
        head.kind,
        attributes,
        head.error,
        head.events,
    )
    return spans
