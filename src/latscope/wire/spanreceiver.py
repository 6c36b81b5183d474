"""A receiver of the server's own trace spans for one run: OTLP/HTTP on loopback, started and stopped by latscope.

A server configured to export traces there (vLLM: ``--otlp-traces-endpoint http://127.0.0.1:4318/v1/traces`` with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``) posts each request's span as it finishes; the span carries the
trace id of the ``traceparent`` latscope sent, which joins it to that request
(:func:`~latscope.signals.serverspans.join_server_spans`).

The receiver speaks HTTP/1.1 (h11): ``POST /v1/traces`` with an OTLP protobuf (``application/x-protobuf``, needs
``opentelemetry-proto``) or OTLP/JSON body, optionally gzip-compressed, answered ``200`` with an empty
``ExportTraceServiceResponse``. Anything else gets a 4xx naming what was wrong; a malformed request never stops it.
It binds 127.0.0.1 unless told otherwise. Exporters batch their spans (the OpenTelemetry SDK's default delay is 5 s),
so :meth:`SpanReceiver.wait_for` waits, bounded, until the spans of the given traces have come.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import time
import zlib
from collections.abc import Iterable
from types import TracebackType

import h11
import orjson

from latscope.signals.serverspans import ServerSpan, SpanDecodeError, spans_from_json, spans_from_protobuf

#: OTLP/HTTP's default port (OpenTelemetry specification, "OTLP/HTTP").
DEFAULT_PORT = 4318
TRACES_PATH = "/v1/traces"
#: The largest export body accepted, bytes (a batch of 512 spans is a few hundred KB).
MAX_BODY_BYTES = 16 * 1024 * 1024
#: How long a run waits for the server's spans after its last request, s: the OpenTelemetry SDK's batch span
#: processor exports every 5 s by default (OTEL_BSP_SCHEDULE_DELAY), so a span can come that late.
SPAN_WAIT_S = 6.0
#: How long a connection may take to send one request, s.
READ_TIMEOUT_S = 10.0


class SpanReceiver:
    """``async with SpanReceiver() as receiver:`` — the server exports to ``receiver.url``; ``receiver.spans`` holds
    every span received, ``receiver.warnings`` what was refused and why. ``port`` 0 picks a free one."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        self.host = host
        self.port = port
        self.spans: list[ServerSpan] = []
        self.warnings: list[str] = []
        self._server: asyncio.Server | None = None
        self._arrived = asyncio.Event()

    @property
    def url(self) -> str:
        """Where to export: ``http://HOST:PORT/v1/traces``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{TRACES_PATH}"

    async def start(self) -> None:
        """Listen (raises :class:`OSError` naming the address when it is taken)."""
        try:
            self._server = await asyncio.start_server(self._serve, self.host, self.port)
        except OSError as exc:
            raise OSError(
                exc.errno, f"cannot receive server spans on {self.host}:{self.port}: {exc.strerror}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close the connections."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    async def __aenter__(self) -> SpanReceiver:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def wait_for(self, trace_ids: Iterable[str], timeout_s: float) -> bool:
        """Wait until a span of every trace in ``trace_ids`` has arrived, at most ``timeout_s`` s. True when all did."""
        wanted = {t for t in trace_ids if t}
        deadline = time.monotonic() + timeout_s
        while not wanted <= {span.trace_id for span in self.spans}:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            while True:
                request, body = await _read_request(conn, reader)
                if request is None:
                    break
                status, payload, content_type = self._handle(request, body)
                headers = [("content-type", content_type), ("content-length", str(len(payload)))]
                writer.write(conn.send(h11.Response(status_code=status, headers=headers)) or b"")
                writer.write(conn.send(h11.Data(data=payload)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break
                conn.start_next_cycle()
        except (h11.ProtocolError, _BodyTooLarge) as exc:
            self.warnings.append(f"a malformed export request was refused: {exc}")
            with contextlib.suppress(h11.ProtocolError, ConnectionError):
                writer.write(conn.send(h11.Response(status_code=400, headers=[("content-length", "0")])) or b"")
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    def _handle(self, request: h11.Request, body: bytes) -> tuple[int, bytes, str]:
        """The status, body and content type answering one request; received spans are kept."""
        target = request.target.decode("latin-1").split("?", 1)[0]
        if request.method != b"POST" or target != TRACES_PATH:
            return 404, b"only POST /v1/traces is served here", "text/plain"
        headers = {name.lower(): value for name, value in request.headers}
        content_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().decode("latin-1")
        try:
            data = _decompress(body, headers.get(b"content-encoding", b"").decode("latin-1").strip().lower())
            if content_type == "application/json":
                spans = spans_from_json(orjson.loads(data))
                answer, answer_type = b"{}", "application/json"
            else:
                spans = spans_from_protobuf(data)
                answer, answer_type = b"", "application/x-protobuf"  # an empty ExportTraceServiceResponse
        except (SpanDecodeError, orjson.JSONDecodeError, OSError, EOFError, zlib.error) as exc:
            self.warnings.append(
                f"an export of {len(body)} bytes ({content_type or 'no content type'}) was refused: {exc}"
            )
            return 400, str(exc).encode(), "text/plain"
        except ImportError as exc:
            self.warnings.append(str(exc))
            return 415, str(exc).encode(), "text/plain"
        self.spans.extend(spans)
        self._arrived.set()
        return 200, answer, answer_type


class _BodyTooLarge(Exception):
    """An export body over :data:`MAX_BODY_BYTES`."""


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise SpanDecodeError(f"content-encoding {encoding!r} is not supported (gzip, deflate or none)")


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[h11.Request | None, bytes]:
    """The next request and its whole body, or (None, b"") when the peer closed between requests."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await asyncio.wait_for(reader.read(65536), READ_TIMEOUT_S)
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY_BYTES:
                raise _BodyTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""
