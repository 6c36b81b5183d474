"""A small HTTP/1.1 + HTTP/2 test server on 127.0.0.1 (h11/h2 on asyncio streams), with optional TLS.

Tests give it a handler ``async def handler(request: Received, reply: Reply) -> None``; the reply object can do what
well-behaved and badly-behaved servers do: stream events, keep or drop the connection, truncate a chunked body,
reset the connection. It is deliberately independent of the lab server.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from time import monotonic_ns
from types import TracebackType

import h2.config
import h2.connection
import h2.events
import h11
import orjson


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    http_version: str
    connection_index: int  #: 1-based count of the connection it came on

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name.lower():
                return v
        return None


class Reply:
    """How a handler answers. ``start`` then ``send``* then ``end``; or ``reset`` / ``close`` to misbehave."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop the TCP connection with an RST (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self) -> None:
        """Close the connection (FIN) wherever the response is."""
        self.writer.close()

    async def send_json(self, status: int, obj: object, headers: list[tuple[str, str]] | None = None) -> None:
        body = orjson.dumps(obj)
        await self.start(
            status, [("content-type", "application/json"), ("content-length", str(len(body)))] + (headers or [])
        )
        await self.send(body)
        await self.end()

    async def send_event(self, obj: dict[str, object]) -> int:
        """Send one SSE event with ``"latscope": {"sent_ns": now}`` added; returns the stamp."""
        sent_ns = monotonic_ns()
        obj["latscope"] = {"sent_ns": sent_ns}
        await self.send(b"data: " + orjson.dumps(obj) + b"\n\n")
        return sent_ns


class _H11Reply(Reply):
    def __init__(self, writer: asyncio.StreamWriter, conn: h11.Connection, keep_alive: bool) -> None:
        super().__init__(writer)
        self.conn = conn
        self.keep_alive = keep_alive

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        if not self.keep_alive:
            headers = [*headers, ("connection", "close")]
        self.writer.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
        await self.writer.drain()

    async def send(self, data: bytes) -> None:
        self.writer.write(self.conn.send(h11.Data(data=data)))
        await self.writer.drain()

    async def end(self) -> None:
        self.writer.write(self.conn.send(h11.EndOfMessage()))
        await self.writer.drain()


class _H2Reply(Reply):
    def __init__(self, writer: asyncio.StreamWriter, session: _H2Session, stream_id: int) -> None:
        super().__init__(writer)
        self.session = session
        self.stream_id = stream_id

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        fields = [(":status", str(status))] + [(k.lower(), v) for k, v in headers if k.lower() != "connection"]
        self.session.conn.send_headers(self.stream_id, fields)
        await self.session.flush()

    async def send(self, data: bytes) -> None:
        conn = self.session.conn
        while data:
            window = min(conn.local_flow_control_window(self.stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                await self.session.window_open.wait()
                self.session.window_open.clear()
                continue
            conn.send_data(self.stream_id, data[:window])
            data = data[window:]
        await self.session.flush()

    async def end(self) -> None:
        self.session.conn.end_stream(self.stream_id)
        await self.session.flush()


class _H2Session:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.window_open = asyncio.Event()

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.writer.write(data)
            await self.writer.drain()


Handler = Callable[[Received, Reply], Awaitable[None]]


@dataclass
class StreamServer:
    """Serve ``handler`` on 127.0.0.1 (random port). ``ssl_context`` turns on TLS (with ALPN h2 when the context
    offers it); ``keep_alive`` False answers every HTTP/1.1 request with ``Connection: close``."""

    handler: Handler
    ssl_context: ssl.SSLContext | None = None
    keep_alive: bool = True
    #: when set, a fresh server context per connection (TLS via start_tls after accept): nothing, no session cache
    #: and no ticket key, is shared between connections, so no TLS session can ever be resumed
    ssl_factory: Callable[[], ssl.SSLContext] | None = None
    host: str = "127.0.0.1"
    port: int = 0
    connections: int = 0
    requests: list[Received] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        scheme = "https" if self.ssl_context is not None or self.ssl_factory is not None else "http"
        return f"{scheme}://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> StreamServer:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # ends each connection's read loop with EOF
        for task in list(self._tasks):
            task.cancel()  # handler tasks of HTTP/2 streams
        await asyncio.sleep(0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        index = self.connections
        try:
            if self.ssl_factory is not None:
                await writer.start_tls(self.ssl_factory())
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
                await self._serve_h2(reader, writer, index)
            else:
                await self._serve_h11(reader, writer, index)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, h11.ProtocolError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve_h11(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request: h11.Request | None = None
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    conn.receive_data(data)
                    if not data and conn.their_state is not h11.SEND_BODY and request is None:
                        return
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    return
            assert request is not None
            received = Received(
                method=request.method.decode(),
                target=request.target.decode(),
                headers=[(k.decode(), v.decode("latin-1")) for k, v in request.headers],
                body=body,
                http_version="HTTP/" + request.http_version.decode(),
                connection_index=index,
            )
            self.requests.append(received)
            await self.handler(received, _H11Reply(writer, conn, self.keep_alive))
            if writer.is_closing():
                return
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
            else:
                writer.close()
                return

    async def _serve_h2(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        session = _H2Session(writer)
        session.conn.initiate_connection()
        await session.flush()
        partial: dict[int, tuple[list[tuple[str, str]], bytearray]] = {}
        while True:
            data = await reader.read(65536)
            if not data:
                return
            for event in session.conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    partial[event.stream_id] = ([(str(k), str(v)) for k, v in event.headers or []], bytearray())
                elif isinstance(event, h2.events.DataReceived):
                    partial[event.stream_id][1].extend(event.data)
                    session.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    fields, body = partial.pop(event.stream_id)
                    pseudo = {k: v for k, v in fields if k.startswith(":")}
                    received = Received(
                        method=pseudo.get(":method", ""),
                        target=pseudo.get(":path", ""),
                        headers=[(k, v) for k, v in fields if not k.startswith(":")],
                        body=bytes(body),
                        http_version="HTTP/2",
                        connection_index=index,
                    )
                    self.requests.append(received)
                    task = asyncio.create_task(self.handler(received, _H2Reply(writer, session, event.stream_id)))
                    self._tasks.add(task)  # type: ignore[arg-type]
                    task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.WindowUpdated):
                    session.window_open.set()
            await session.flush()


# --- handlers and builders shared by the tests ------------------------------------------------------------------


def chat_chunk(
    content: str | None = None, *, finish_reason: str | None = None, role: str | None = None
) -> dict[str, object]:
    """An OpenAI ``chat.completion.chunk`` object."""
    delta: dict[str, object] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def completion_chunk(text: str | None = None, *, finish_reason: str | None = None) -> dict[str, object]:
    """An OpenAI ``text_completion`` stream chunk (``/v1/completions``)."""
    return {
        "id": "cmpl-test",
        "object": "text_completion",
        "created": 1700000000,
        "model": "test-model",
        "choices": [{"index": 0, "text": text or "", "finish_reason": finish_reason}],
    }


SSE_HEADERS = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


def paced_stream(events: int, interval_s: float = 0.0) -> Handler:
    """A handler that streams ``events`` content chunks ``interval_s`` apart, each stamped with its send time, then a
    finish chunk with usage and ``[DONE]``."""

    async def handler(request: Received, reply: Reply) -> None:
        # the shape the request asked for: /chat/completions chunks, or /completions ones
        chunk = chat_chunk if "/chat/" in request.target else completion_chunk
        await reply.start(200, SSE_HEADERS)
        if chunk is chat_chunk:
            await reply.send_event(chat_chunk(role="assistant", content=""))
        for i in range(events):
            if interval_s:
                await asyncio.sleep(interval_s)
            await reply.send_event(chunk(f"tok{i} "))
        final = chunk(finish_reason="stop")
        final["usage"] = {"prompt_tokens": 5, "completion_tokens": events, "total_tokens": 5 + events}
        await reply.send_event(final)
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    return handler


def models_handler(next_handler: Handler, models: tuple[str, ...] = ("test-model",)) -> Handler:
    """Answer ``GET /v1/models`` with ``models``; pass everything else to ``next_handler``."""

    async def handler(request: Received, reply: Reply) -> None:
        if request.method == "GET" and request.target.rstrip("/").endswith("/models"):
            await reply.send_json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in models]})
            return
        await next_handler(request, reply)

    return handler


class ServerThread:
    """A :class:`StreamServer` on its own event loop in a background thread, for synchronous tests (click's
    CliRunner) that run the client on another loop. ``with ServerThread(handler) as server: server.base_url``."""

    def __init__(self, handler: Handler, **server_args: object) -> None:
        self.server = StreamServer(handler, **server_args)  # type: ignore[arg-type]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def __enter__(self) -> StreamServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.__aenter__(), self._loop).result(timeout=10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.__aexit__(None, None, None), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
