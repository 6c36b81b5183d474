"""One HTTP/2 connection, framed by h2: concurrent streams, flow control both ways, one write per event.

Negotiated by ALPN ``h2`` over TLS, or by prior knowledge on a cleartext listener (the client opens with the
connection preface, RFC 9113 §3.3). Each stream's handler runs as its own task; a ``RST_STREAM`` from the client
cancels it just like a closed HTTP/1.1 connection does.

Flow control: the lab grants large receive windows (bodies of several MB arrive without waiting for
``WINDOW_UPDATE`` round trips) and queues outbound data per stream when the client's window is exhausted, sending the
rest on ``WINDOW_UPDATE``. A stream event that fits the window and one frame — every token event — is one DATA frame
and one transport write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes

from latscope.lab.errors import payload_too_large
from latscope.lab.http.exchange import Headers, Request, ResponseChannel
from latscope.lab.http.session import JSON_CONTENT_TYPE, Session, now_ns
from latscope.lab.http.streams import StreamChannel, complete_request, head_block

#: Per-stream receive window the lab advertises; the connection window is raised to the body limit.
STREAM_WINDOW = 4 * 1024 * 1024
#: Concurrent streams a client may open on one connection.
MAX_CONCURRENT_STREAMS = 256


class _Stream:
    """What the session tracks for one request stream."""

    __slots__ = (
        "body",
        "body_len",
        "channel",
        "ended",
        "handler_done",
        "headers",
        "method",
        "pending",
        "pending_end",
        "refused",
        "started_ns",
        "stream_id",
        "target",
        "task",
        "window_waiters",
    )

    def __init__(self, stream_id: int, method: str, target: str, headers: list[tuple[bytes, bytes]]) -> None:
        self.stream_id = stream_id
        self.method = method
        self.target = target
        self.headers = headers
        self.body: list[bytes] = []
        self.body_len = 0
        self.started_ns = now_ns()
        self.channel: H2Channel | None = None
        self.pending: deque[bytes] = deque()  # outbound data waiting for flow-control window
        self.pending_end = False  # end the stream once ``pending`` is sent
        self.ended = False  # END_STREAM sent
        self.refused = False  # answered early (413); the rest of the body is discarded
        self.task: asyncio.Task[None] | None = None  # the handler answering this stream
        self.handler_done = False  # the handler returned; the stream goes once its data is out
        self.window_waiters: list[asyncio.Future[None]] = []  # writers waiting for the client's window


class H2Session(Session):
    """An HTTP/2 connection."""

    def _start(self) -> None:
        self.info.http_version = "2"
        self.conn = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        self._streams: dict[int, _Stream] = {}
        self._goaway_sent = False
        self.conn.initiate_connection()
        self.conn.update_settings(
            {
                SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
                SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                SettingCodes.MAX_HEADER_LIST_SIZE: self.limits.max_header_bytes,
            }
        )
        connection_window = max(self.limits.max_body_bytes, STREAM_WINDOW)
        self.conn.increment_flow_control_window(connection_window - 65_535)  # 65 535: the RFC's initial window
        self.flush()
        self._arm(self.limits.header_timeout_s, self._on_timeout)

    # -- input ---------------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.lost:
            return
        try:
            events = self.conn.receive_data(data)
        except ProtocolError:
            # h2 has queued the GOAWAY that says why; send it and hang up.
            self.flush()
            self.close()
            return
        for event in events:
            if isinstance(event, RequestReceived):
                self._on_request(event)
            elif isinstance(event, DataReceived):
                self._on_data(event)
            elif isinstance(event, StreamEnded):
                self._on_stream_ended(event.stream_id)
            elif isinstance(event, StreamReset):
                self._on_reset(event.stream_id)
            elif isinstance(event, WindowUpdated | RemoteSettingsChanged):
                self._pump_all()
            elif isinstance(event, ConnectionTerminated):
                self.flush()
                self.close()
                return
        self.flush()

    def _on_request(self, event: RequestReceived) -> None:
        self._disarm()  # a request head arrived: the connection is in use
        pseudo: dict[bytes, bytes] = {}
        headers: list[tuple[bytes, bytes]] = []
        for name, value in event.headers:
            key = bytes(name) if not isinstance(name, str) else name.encode()
            val = bytes(value) if not isinstance(value, str) else value.encode()
            if key.startswith(b":"):
                pseudo[key] = val
            else:
                headers.append((key, val))
        stream = _Stream(
            event.stream_id,
            pseudo.get(b":method", b"GET").decode("ascii", "replace"),
            pseudo.get(b":path", b"/").decode("latin-1"),
            headers,
        )
        self._streams[event.stream_id] = stream
        for name, value in headers:
            if name == b"content-length" and value.isdigit() and int(value) > self.limits.max_body_bytes:
                self._refuse(stream)
                return

    def _on_data(self, event: DataReceived) -> None:
        # Give the window back at once: the lab buffers whole bodies itself, bounded by max_body_bytes.
        if event.flow_controlled_length:
            # ProtocolError: the stream closed meanwhile; the connection window was still credited
            with contextlib.suppress(ProtocolError):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        stream = self._streams.get(event.stream_id)
        if stream is None or stream.refused or event.data is None:
            return
        stream.body.append(event.data)
        stream.body_len += len(event.data)
        if stream.body_len > self.limits.max_body_bytes:
            self._refuse(stream)

    def _on_stream_ended(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.refused:
            return
        request = complete_request(stream, self.info)
        channel = H2Channel(self, stream)
        stream.channel = channel
        stream.task = self._spawn(request, channel)

    def _on_reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        stream.ended = True
        stream.pending.clear()
        self._wake_stream(stream)
        if stream.channel is not None:
            stream.channel.reset = True
        if stream.task is not None:
            stream.task.cancel()  # the client gave up on this stream: free what its handler holds
        self._after_stream()

    def _refuse(self, stream: _Stream) -> None:
        """413 before the body is complete, then RST_STREAM(NO_ERROR): RFC 9113 §8.1 allows an early response."""
        stream.refused = True
        error = payload_too_large(self.limits.max_body_bytes)
        body = error.body()
        self.conn.send_headers(
            stream.stream_id,
            [(b":status", b"413"), JSON_CONTENT_TYPE, (b"content-length", str(len(body)).encode())],
        )
        self.send(stream, body, end=True)
        with contextlib.suppress(ProtocolError):  # already closed by the END_STREAM above and the client's own end
            self.conn.reset_stream(stream.stream_id, ErrorCodes.NO_ERROR)
        self._streams.pop(stream.stream_id, None)
        self.flush()
        self._after_stream()

    # -- output --------------------------------------------------------------------------------------------------
    def send(self, stream: _Stream, data: bytes, *, end: bool) -> None:
        """Queue ``data`` on ``stream`` and send what the flow-control windows allow, END_STREAM when ``end``."""
        if stream.ended:
            return
        if data:
            stream.pending.append(data)
        stream.pending_end = stream.pending_end or end
        self._pump(stream)

    def _pump(self, stream: _Stream) -> None:
        conn = self.conn
        sid = stream.stream_id
        try:
            # Each pass sends one frame or stops: bounded by the queued bytes.
            while stream.pending:
                window = conn.local_flow_control_window(sid)
                if window <= 0:
                    return
                chunk = stream.pending[0]
                size = min(len(chunk), window, conn.max_outbound_frame_size)
                conn.send_data(sid, chunk[:size] if size < len(chunk) else chunk)
                if size < len(chunk):
                    stream.pending[0] = chunk[size:]
                else:
                    stream.pending.popleft()
            if stream.pending_end and not stream.ended:
                stream.ended = True
                conn.end_stream(sid)
        except ProtocolError:
            stream.ended = True  # the stream was reset or closed underneath us
            stream.pending.clear()
        if not stream.pending and stream.window_waiters:
            self._wake_stream(stream)
        if stream.handler_done:
            self._forget_if_done(stream)

    async def wait_stream_window(self, stream: _Stream) -> None:
        """Return once ``stream`` has nothing queued for lack of window (or it ended, or the connection is gone)."""
        if not stream.pending or stream.ended or self.lost:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        stream.window_waiters.append(waiter)
        await waiter

    def _wake_stream(self, stream: _Stream) -> None:
        waiters, stream.window_waiters = stream.window_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _pump_all(self) -> None:
        for stream in list(self._streams.values()):
            if stream.pending or (stream.pending_end and not stream.ended):
                self._pump(stream)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.lost:
            self.transport.write(data)

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def _handler_done(self, request: Request, channel: ResponseChannel) -> None:
        if self.lost or request.stream_id is None:
            return
        stream = self._streams.get(request.stream_id)
        if stream is not None:
            stream.handler_done = True
            if not channel.finished and not stream.ended:
                with contextlib.suppress(ProtocolError):
                    self.conn.reset_stream(request.stream_id, ErrorCodes.INTERNAL_ERROR)  # cut short: say so
                stream.ended = True
                stream.pending.clear()
            self._forget_if_done(stream)
        self.flush()

    def _forget_if_done(self, stream: _Stream) -> None:
        """Drop a stream whose handler returned and whose last byte went out; then maybe idle or close."""
        if not (stream.handler_done and stream.ended and not stream.pending):
            return
        self._streams.pop(stream.stream_id, None)
        self._after_stream()

    def _after_stream(self) -> None:
        """A stream is gone: close on ``no-keepalive``, or start the idle timer when nothing is in flight."""
        if self.lost or self._streams:
            return
        if not self.config.keep_alive:
            self.goodbye()
            self.close()
        else:
            self._arm(self.limits.keepalive_timeout_s, self._on_timeout)

    def goodbye(self) -> None:
        """Send GOAWAY(NO_ERROR): the client must open a new connection for its next request."""
        if self._goaway_sent or self.lost:
            return
        self._goaway_sent = True
        try:
            self.conn.close_connection(ErrorCodes.NO_ERROR)
        except ProtocolError:
            return
        self.flush()

    def shutdown(self) -> None:
        self.goodbye()
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        for stream in self._streams.values():
            self._wake_stream(stream)

    def _on_timeout(self) -> None:
        self._timer = None
        self.goodbye()
        self.close()


class H2Channel(StreamChannel):
    """The response side of one HTTP/2 stream."""

    def __init__(self, session: H2Session, stream: _Stream) -> None:
        super().__init__()
        self._session = session
        self._stream = stream
        self._conn = session.conn

    @property
    def _connection_lost(self) -> bool:
        return self._session.lost

    def _send_data(self, data: bytes, end: bool) -> None:
        self._session.send(self._stream, data, end=end)
        self._session.flush()

    @property
    def paused(self) -> bool:
        # Also when the client's flow-control window is exhausted and data waits in the stream's queue.
        return self._session.write_paused or bool(self._stream.pending)

    def _send_head(self, status: int, headers: Headers, extra: list[tuple[bytes, bytes]]) -> bool:
        if self.closed or self._stream.ended:
            return False
        try:
            self._conn.send_headers(self._stream.stream_id, head_block(status, headers, extra))
        except ProtocolError:
            self.reset = True
            return False
        self.headers_sent_ns = now_ns()
        return True

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._finished:
            return
        self._finished = True
        if self._send_head(status, headers, [(b"content-length", str(len(body)).encode())]):
            if self._stream.method == "HEAD":
                body = b""  # RFC 9110 §9.3.2: the head only
            self.body_bytes += len(body)
            self._send_data(body, True)

    def start(self, status: int, headers: Headers) -> None:
        if self._send_head(status, headers, []):
            self._session.flush()

    async def drain(self) -> None:
        await self._session.wait_writable()
        await self._session.wait_stream_window(self._stream)
