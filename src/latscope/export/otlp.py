"""Spans out: OTLP over HTTP/protobuf to a receiver (``--otlp URL``) or OTLP JSON lines to a file (``--otlp-file``).

The thin I/O shell around :mod:`latscope.export.spans`: it measures the clock offset, converts
:class:`~latscope.export.spans.Span` records into the official SDK's ``ReadableSpan`` objects and hands them to its
exporters. The SDK and the exporter are the ``otel`` extra; :func:`otel_available` tells whether it is installed and
:data:`MISSING_OTEL` how to install it.

File format: JSON Lines, one ``ExportTraceServiceRequest`` per line in the OTLP/JSON encoding of the OTLP
specification (lowerCamelCase field names, trace and span ids as hex strings, enums as integers, 64-bit integers as
decimal strings). It is what the OpenTelemetry Collector's ``file`` exporter writes and its ``otlpjsonfile`` receiver
reads, so a file can be replayed into any backend; a line per batch (:data:`SPANS_PER_BATCH`) keeps the lines of a
long bench run bounded and lets a reader stream them.

Clock: spans need wall-clock times (ns since the Unix epoch), marks are :func:`time.monotonic_ns`. One offset per
process (:func:`clock_offset`), so every duration stays an exact difference of marks and all spans of a run move
together; the offset is read between two monotonic reads, the closest of :data:`CLOCK_SAMPLES` pairs, and half that
pair's distance is its uncertainty (a microsecond or two), beyond which stands the wall clock's own error (NTP: a
millisecond or less on a synchronised host). A wall clock stepped during a run does not move its spans. The resource
attribute ``latscope.clock.offset_uncertainty_ns`` records the reading's uncertainty.
"""

from __future__ import annotations

import base64
import importlib.util
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from latscope import __version__
from latscope.export.spans import Span

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

#: What to tell a user whose installation lacks the extra.
MISSING_OTEL = (
    "--otlp and --otlp-file need the OpenTelemetry SDK and OTLP exporter, which are not installed; install the "
    "extra: pip install 'latscope[otel]'"
)
#: The modules the extra provides.
_OTEL_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http", "opentelemetry.proto")
#: Spans per OTLP request (and per line of a file): a bench run's requests with their phases go in batches of a few
#: hundred kB, under the 4 MiB a receiver accepts by default.
SPANS_PER_BATCH = 4096
#: Pairs of monotonic reads around a wall-clock read; the closest pair sets the offset.
CLOCK_SAMPLES = 64
#: Seconds the exporter may spend on one OTLP request, retries included.
EXPORT_TIMEOUT_S = 10.0


class OtlpExportError(RuntimeError):
    """The spans could not be delivered (the receiver refused them, or could not be reached)."""


def otel_available() -> bool:
    """True when the ``otel`` extra is installed."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in _OTEL_MODULES)
    except ModuleNotFoundError:  # a parent package missing
        return False


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Wall clock − monotonic clock, ns, and half the width of the window it was read in, ns."""

    offset_ns: int
    uncertainty_ns: int


def measure_clock_offset(samples: int = CLOCK_SAMPLES) -> ClockOffset:
    """Read ``time.time_ns()`` between two ``time.monotonic_ns()`` reads ``samples`` times; keep the tightest."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        width = after - before
        if best is None or width < best[1]:
            best = (wall - (before + after) // 2, width)
    assert best is not None
    return ClockOffset(best[0], (best[1] + 1) // 2)


_OFFSET: ClockOffset | None = None


def clock_offset() -> ClockOffset:
    """This process's offset, measured at the first call and kept."""
    global _OFFSET
    if _OFFSET is None:
        _OFFSET = measure_clock_offset()
    return _OFFSET


def _resource(command: str, offset: ClockOffset) -> Resource:
    from opentelemetry.sdk.resources import Resource

    return Resource.create(
        {
            "service.name": "latscope",
            "service.version": __version__,
            "latscope.command": command,
            "latscope.clock.offset_uncertainty_ns": offset.uncertainty_ns,
        }
    )


def to_sdk_spans(spans: Sequence[Span], resource: Resource) -> list[ReadableSpan]:
    """The spans as the SDK's ``ReadableSpan`` objects, ready for any of its exporters."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    scope = InstrumentationScope("latscope", __version__)
    flags = TraceFlags(TraceFlags.SAMPLED)
    local = {s.span_id for s in spans}
    out: list[ReadableSpan] = []
    for s in spans:
        trace_id = int(s.trace_id, 16)
        parent = None
        if s.parent_span_id is not None:
            remote = s.parent_span_id not in local  # the caller's span, from a traceparent it set
            parent = SpanContext(trace_id, int(s.parent_span_id, 16), is_remote=remote, trace_flags=flags)
        out.append(
            ReadableSpan(
                name=s.name,
                context=SpanContext(trace_id, int(s.span_id, 16), is_remote=False, trace_flags=flags),
                parent=parent,
                resource=resource,
                attributes=dict(s.attributes),
                events=[Event(e.name, dict(e.attributes), e.at_ns) for e in s.events],
                kind=SpanKind.CLIENT if s.kind == "client" else SpanKind.INTERNAL,
                status=Status(StatusCode.ERROR, s.error) if s.error is not None else Status(StatusCode.UNSET),
                start_time=s.start_ns,
                end_time=s.end_ns,
                instrumentation_scope=scope,
            )
        )
    return out


def _batches(spans: Sequence[Span]) -> Iterator[Sequence[Span]]:
    """Batches of at most :data:`SPANS_PER_BATCH` spans that never split a request from its phases."""
    start = 0
    while start < len(spans):
        end = min(len(spans), start + SPANS_PER_BATCH)
        while end < len(spans) and spans[end].kind != "client" and end > start + 1:
            end -= 1  # back to the start of a request
        yield spans[start:end]
        start = end


def send_http(spans: Sequence[Span], url: str, *, command: str, timeout_s: float = EXPORT_TIMEOUT_S) -> None:
    """POST the spans to the OTLP/HTTP receiver at ``url`` (e.g. ``http://127.0.0.1:4318/v1/traces``), protobuf
    encoded, in batches; raise :class:`OtlpExportError` when a batch is not accepted."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    resource = _resource(command, clock_offset())
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
    try:
        for batch in _batches(spans):
            if exporter.export(to_sdk_spans(batch, resource)) is not SpanExportResult.SUCCESS:
                raise OtlpExportError(f"the OTLP receiver at {url} did not accept the spans (see the warning above)")
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]


_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any) -> None:
    """OTLP/JSON writes ids as hex, where protobuf's JSON mapping writes base64: rewrite them in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)


def json_lines(spans: Sequence[Span], *, command: str) -> Iterator[bytes]:
    """The spans as OTLP/JSON ``ExportTraceServiceRequest`` documents, one line per batch (newline included)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    resource = _resource(command, clock_offset())
    for batch in _batches(spans):
        document = MessageToDict(encode_spans(to_sdk_spans(batch, resource)), use_integers_for_enums=True)
        _hex_ids(document)
        yield orjson.dumps(document) + b"\n"


def write_file(spans: Sequence[Span], path: str | Path, *, command: str) -> int:
    """Write the spans to ``path`` as OTLP JSON lines (replacing it); returns the bytes written."""
    written = 0
    with open(path, "wb") as fh:
        for line in json_lines(spans, command=command):
            fh.write(line)
            written += len(line)
    return written


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """Where a command's spans go: an OTLP/HTTP receiver's URL, a file, or both."""

    url: str | None = None
    file: str | None = None

    @property
    def wanted(self) -> bool:
        """True when spans are to be exported at all."""
        return self.url is not None or self.file is not None

    def export(self, spans: Sequence[Span], *, command: str) -> list[str]:
        """Deliver ``spans``; returns a line per destination saying what went where (raises
        :class:`OtlpExportError`)."""
        done: list[str] = []
        requests = sum(1 for s in spans if s.kind == "client")
        if self.file is not None:
            size = write_file(spans, self.file, command=command)
            done.append(f"wrote {len(spans)} spans of {requests} requests to {self.file} ({size / 1e3:.0f} kB)")
        if self.url is not None:
            send_http(spans, self.url, command=command)
            done.append(f"sent {len(spans)} spans of {requests} requests to {self.url}")
        return done
