"""A real OTLP/HTTP trace receiver on loopback: accepts ``POST /v1/traces`` (protobuf, optionally gzip) and keeps
each decoded ``ExportTraceServiceRequest``; also a reader of OTLP/JSON lines and a thread running the lab."""

from __future__ import annotations

import asyncio
import base64
import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from latscope.lab.app import Lab


class OtlpReceiver:
    """``with OtlpReceiver() as rx:`` — ``rx.url`` to export to, ``rx.requests`` what arrived, decoded."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.paths.append(self.path)
                if self.path == "/v1/traces" and status == 200:
                    receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                payload = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class ReceivedSpan:
    """A span as it arrived, ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    kind: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    events: list[str]
    resource: dict[str, Any]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def spans_of(requests: list[ExportTraceServiceRequest]) -> list[ReceivedSpan]:
    """Every span of the requests, flattened."""
    out: list[ReceivedSpan] = []
    for request in requests:
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            kind=s.kind,
                            status_code=s.status.code,
                            status_message=s.status.message,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=[e.name for e in s.events],
                            resource=resource,
                        )
                    )
    return out


def _b64_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                _b64_ids(value)
    elif isinstance(node, list):
        for item in node:
            _b64_ids(item)


def read_json_lines(path: Path) -> list[ExportTraceServiceRequest]:
    """An OTLP/JSON lines file, each line decoded as the OTLP spec says (ids are hex, not protobuf's base64)."""
    out = []
    for line in path.read_bytes().splitlines():
        document = orjson.loads(line)
        _b64_ids(document)
        out.append(ParseDict(document, ExportTraceServiceRequest()))
    return out


class LabThread:
    """The lab on its own event loop in a background thread (for a command run through click's CliRunner)."""

    def __init__(self, **settings: Any) -> None:
        self.lab = Lab(**settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> Lab:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.lab.start(), self._loop).result(30)
        return self.lab

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.lab.stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def by_trace(spans: list[ReceivedSpan]) -> Iterator[tuple[ReceivedSpan, list[ReceivedSpan]]]:
    """Each request span (kind CLIENT) with its children, in order."""
    for root in (s for s in spans if s.kind == 3):  # SPAN_KIND_CLIENT
        yield root, [s for s in spans if s.parent_span_id == root.span_id and s.trace_id == root.trace_id]
