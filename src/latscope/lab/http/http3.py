"""HTTP/3 (RFC 9114) over QUIC (RFC 9000), with aioquic as the protocol engine: the lab's UDP listener.

The lab serves HTTP/3 on the same port number as its TCP listener, over UDP, with the same certificate and the same
handler: each request stream becomes a :class:`~latscope.lab.http.exchange.Request` and an :class:`H3Channel`, so the
gateway, scheduler and stream writer never know that QUIC carries them. The TCP listener announces the UDP one on
every response (``Alt-Svc: h3=":PORT"``, :func:`with_alt_svc`), as a real server does: a client cannot know that UDP
will answer before it was told.

aioquic does the QUIC and TLS 1.3 work (packet protection, loss recovery, flow control) and frames HTTP/3 with QPACK;
this module owns the listener, the request streams, their handler tasks and every write. A stream event is one
``send_data`` followed by one transmit, so each event leaves in its own datagram as it leaves in its own TCP write
over HTTP/1.1 and HTTP/2.

Never crashing on malformed input: aioquic drops datagrams that do not parse and closes a connection with an
HTTP/3 error code when its peer breaks the protocol; whatever else goes wrong while one connection's input is handled
closes that connection (``INTERNAL_ERROR``) and leaves the listener and the other connections alone.

Session resumption: with the lab's resumption on, the listener keeps the tickets it issues (in memory) so a client
offering one resumes (a PSK handshake, still one round trip; the ``tls-no-tickets`` fault stops it as over TCP).
0-RTT (early data) is not accepted: the lab's answers are not replay-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer, serve
from aioquic.h3.connection import H3_ALPN, ErrorCode, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamReset
from aioquic.tls import SessionTicket

from latscope.lab.certs import CertFiles
from latscope.lab.http.exchange import ConnectionInfo, Handler, Headers, Request, ResponseChannel
from latscope.lab.http.limits import ConnectionLimits
from latscope.lab.http.session import error_response, logger, now_ns
from latscope.lab.http.streams import ConnectionCounter, StreamChannel, complete_request, head_block

# aioquic logs a peer's protocol errors itself (as warnings); the lab answers or closes, which is all a peer gets
logging.getLogger("quic").addHandler(logging.NullHandler())

#: The most session tickets the listener keeps for resumption; the oldest go first (a lab runs for hours at most).
MAX_TICKETS = 4096


def alt_svc_value(port: int) -> bytes:
    """The ``Alt-Svc`` value announcing HTTP/3 on ``port`` of the same host, fresh for a day (RFC 7838 §3)."""
    return f'h3=":{port}"; ma=86400'.encode()


class _AltSvcChannel(ResponseChannel):
    """A TCP response channel that adds the ``Alt-Svc`` field to the response head; everything else passes through."""

    def __init__(self, inner: ResponseChannel, value: bytes) -> None:
        self._inner = inner
        self._field = (b"alt-svc", value)

    # the base declares these as plain attributes; a wrapper reads them through from the channel it wraps
    @property
    def headers_sent_ns(self) -> int | None:  # type: ignore[override]
        return self._inner.headers_sent_ns

    @property
    def body_bytes(self) -> int:  # type: ignore[override]
        return self._inner.body_bytes

    @property
    def write_calls(self) -> int:  # type: ignore[override]
        return self._inner.write_calls

    @property
    def closed(self) -> bool:
        return self._inner.closed

    @property
    def paused(self) -> bool:
        return self._inner.paused

    @property
    def finished(self) -> bool:
        return self._inner.finished

    def _with_field(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        return [*((name, value) for name, value in headers if name != b"alt-svc"), self._field]

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self._inner.respond(status, self._with_field(headers), body)

    def start(self, status: int, headers: Headers) -> None:
        self._inner.start(status, self._with_field(headers))

    def write(self, data: bytes) -> None:
        self._inner.write(data)

    def finish(self) -> None:
        self._inner.finish()

    async def drain(self) -> None:
        await self._inner.drain()


def with_alt_svc(handler: Handler, port: Callable[[], int]) -> Handler:
    """``handler`` with ``Alt-Svc: h3=":PORT"`` on every response it sends over TCP (HTTP/3 responses need none);
    ``port`` is asked at each request, since a listener on port 0 learns its port only once bound."""

    async def advertised(request: Request, channel: ResponseChannel) -> None:
        if request.connection.http_version == "3":
            await handler(request, channel)
        else:
            await handler(request, _AltSvcChannel(channel, alt_svc_value(port())))

    return advertised


class _TicketStore:
    """The session tickets the listener issued, by ticket label, oldest first out."""

    def __init__(self) -> None:
        self._tickets: dict[bytes, SessionTicket] = {}

    def add(self, ticket: SessionTicket) -> None:
        if len(self._tickets) >= MAX_TICKETS:
            self._tickets.pop(next(iter(self._tickets)))
        self._tickets[ticket.ticket] = ticket

    def pop(self, label: bytes) -> SessionTicket | None:
        # one use per ticket (RFC 8446 §8.1 advises single-use tickets against replay)
        return self._tickets.pop(label, None)


@dataclass(slots=True)
class _Stream:
    """What the connection tracks for one request stream until its handler returned."""

    stream_id: int
    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    started_ns: int
    body: list[bytes] = field(default_factory=list)
    body_len: int = 0
    refused: bool = False  #: answered early (413, 431, 400); the rest of the body is discarded
    channel: H3Channel | None = None
    task: asyncio.Task[None] | None = None


class H3Protocol(QuicConnectionProtocol):
    """One QUIC connection carrying HTTP/3 request streams; created by aioquic's listener per connection."""

    def __init__(self, quic: QuicConnection, *, server: H3Server, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self.server = server
        self.h3 = H3Connection(quic)
        self.lost = False
        self.info = ConnectionInfo(
            connection_id=server.next_connection_id(),
            peer="",
            opened_ns=now_ns(),
            nodelay=True,  # no Nagle over QUIC: a datagram leaves when it is written
            tls=True,
            tls_version="TLSv1.3",  # QUIC carries TLS 1.3 only (RFC 9001 §4.2)
            alpn=H3_ALPN[0],
            http_version="3",
        )
        self._streams: dict[int, _Stream] = {}
        server.protocols.add(self)

    # -- input -----------------------------------------------------------------------------------------------------
    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        if not self.info.peer and isinstance(addr, tuple) and len(addr) >= 2:
            self.info.peer = f"{addr[0]}:{addr[1]}"
        try:
            super().datagram_received(data, addr)
        except Exception:  # an aioquic bug or a state the peer forced: this connection goes, the listener stays
            logger.exception("lab HTTP/3 connection failed on input from %s", self.info.peer)
            self._abort()

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.info.session_reused = bool(event.session_resumed)
            return
        if isinstance(event, ConnectionTerminated):
            self._gone()
            return
        if isinstance(event, StreamReset):
            self._on_reset(event.stream_id)
        for h3_event in self.h3.handle_event(event):
            self._on_h3_event(h3_event)

    def _on_h3_event(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            stream = self._streams.get(event.stream_id)
            if stream is None:
                self._on_request(event)
            # a second HEADERS frame is a trailer section: nothing the lab reads
            if event.stream_ended:
                self._on_stream_ended(event.stream_id)
        elif isinstance(event, DataReceived):
            self._on_data(event)
            if event.stream_ended:
                self._on_stream_ended(event.stream_id)

    def _on_request(self, event: HeadersReceived) -> None:
        pseudo: dict[bytes, bytes] = {}
        headers: list[tuple[bytes, bytes]] = []
        size = 0
        for name, value in event.headers:
            size += len(name) + len(value) + 32  # RFC 9114 §7.2.4.2: the field section size counts 32 per field
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                headers.append((name, value))
        stream = _Stream(
            event.stream_id,
            pseudo.get(b":method", b"GET").decode("ascii", "replace"),
            pseudo.get(b":path", b"/").decode("latin-1"),
            headers,
            now_ns(),
        )
        self._streams[event.stream_id] = stream
        limits = self.server.limits
        if size > limits.max_header_bytes:
            self._refuse(stream, 431, f"The request header fields exceed {limits.max_header_bytes} bytes.")
            return
        for name, value in headers:
            if name == b"content-length" and value.isdigit() and int(value) > limits.max_body_bytes:
                self._refuse(stream, 413, f"The request body exceeds {limits.max_body_bytes} bytes.")
                return

    def _on_data(self, event: DataReceived) -> None:
        stream = self._streams.get(event.stream_id)
        if stream is None or stream.refused or not event.data:
            return
        stream.body.append(event.data)
        stream.body_len += len(event.data)
        limit = self.server.limits.max_body_bytes
        if stream.body_len > limit:
            self._refuse(stream, 413, f"The request body exceeds {limit} bytes.")

    def _on_stream_ended(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.channel is not None:
            return
        if stream.refused:
            del self._streams[stream_id]  # answered already; nothing more comes on it
            return
        request = complete_request(stream, self.info)
        channel = stream.channel = H3Channel(self, stream_id, stream.method)
        task = stream.task = asyncio.get_running_loop().create_task(self._run(request, channel))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    def _on_reset(self, stream_id: int) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        if stream.channel is not None:
            stream.channel.reset = True
        if stream.task is not None:
            stream.task.cancel()  # the client gave up on this stream: free what its handler holds

    def _refuse(self, stream: _Stream, status: int, message: str) -> None:
        """Answer before the request is complete (RFC 9114 §4.1.2 allows an early response); ignore the rest."""
        stream.refused = True
        H3Channel(self, stream.stream_id, stream.method).respond(*error_response(status, message))

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def _run(self, request: Request, channel: H3Channel) -> None:
        try:
            await self.server.handler(request, channel)
        except asyncio.CancelledError:
            pass  # the client reset the stream or went away, or the server is stopping
        except Exception:
            logger.exception("lab handler failed on %s %s (HTTP/3)", request.method, request.path)
            if channel.headers_sent_ns is None and not channel.closed:
                channel.respond(*error_response(500, "The lab failed to answer this request.", "internal_error"))
        finally:
            if not channel.finished and not channel.closed:
                channel.cut()  # cut short: say so rather than leave the client waiting
            if request.stream_id is not None:
                self._streams.pop(request.stream_id, None)

    def send(self, action: Any, *args: Any) -> bool:
        """Run one aioquic send (``self.h3.send_headers`` …) and put what it queued on the wire; False when the
        stream or the connection no longer takes data."""
        if self.lost:
            return False
        try:
            action(*args)
        except Exception:  # aioquic's FrameUnexpected / stream state errors: the stream is over for us
            return False
        self.transmit()
        return True

    def _gone(self) -> None:
        if self.lost:
            return
        self.lost = True
        for stream in list(self._streams.values()):
            if stream.task is not None:
                stream.task.cancel()
        self._streams.clear()
        self.server.protocols.discard(self)

    def _abort(self) -> None:
        with contextlib.suppress(Exception):
            self.close(error_code=ErrorCode.H3_INTERNAL_ERROR, reason_phrase="internal error")
        self._gone()

    def shutdown(self) -> None:
        """Server stop: close the connection (H3_NO_ERROR) and cancel its handlers."""
        with contextlib.suppress(Exception):
            self.close(error_code=ErrorCode.H3_NO_ERROR)
        self._gone()


class H3Channel(StreamChannel):
    """The response side of one HTTP/3 request stream."""

    def __init__(self, protocol: H3Protocol, stream_id: int, method: str) -> None:
        super().__init__()
        self._protocol = protocol
        self._stream_id = stream_id
        self._method = method

    @property
    def _connection_lost(self) -> bool:
        return self._protocol.lost

    def _send_data(self, data: bytes, end: bool) -> None:
        self._protocol.send(self._protocol.h3.send_data, self._stream_id, data, end)

    @property
    def paused(self) -> bool:
        return False  # aioquic queues what flow control holds back; the writer's pacing is the lab's own

    def _head(self, status: int, headers: Headers, extra: Sequence[tuple[bytes, bytes]], end: bool) -> bool:
        if self.closed:
            return False
        block = head_block(status, headers, extra)
        if not self._protocol.send(self._protocol.h3.send_headers, self._stream_id, block, end):
            self.reset = True
            return False
        self.headers_sent_ns = now_ns()
        return True

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._finished:
            return
        self._finished = True
        if self._method == "HEAD":
            body = b""
        length = [(b"content-length", str(len(body)).encode())]
        if not body:
            self._head(status, headers, length, True)
            return
        if self._head(status, headers, length, False):
            self.body_bytes += len(body)
            self._send_data(body, True)

    def start(self, status: int, headers: Headers) -> None:
        self._head(status, headers, (), False)

    def cut(self) -> None:
        """End a response its handler did not finish: reset the stream (H3_INTERNAL_ERROR)."""
        self._finished = True
        quic = self._protocol._quic
        self._protocol.send(quic.reset_stream, self._stream_id, ErrorCode.H3_INTERNAL_ERROR)

    async def drain(self) -> None:
        return None


class H3Server(ConnectionCounter):
    """The lab's UDP listener: HTTP/3 with ``cert``, answering with ``handler``."""

    def __init__(self, handler: Handler, cert: CertFiles, limits: ConnectionLimits, *, resumption: bool) -> None:
        self.handler = handler
        self.limits = limits
        self.protocols: set[H3Protocol] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._cert = cert
        self._tickets = _TicketStore() if resumption else None
        self._server: QuicServer | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind UDP ``host``:``port`` (0: an ephemeral port) and serve; return the bound address."""
        configuration = QuicConfiguration(
            is_client=False,
            alpn_protocols=list(H3_ALPN),
            idle_timeout=self.limits.keepalive_timeout_s,
            max_datagram_frame_size=None,
        )
        configuration.load_cert_chain(self._cert.cert_path, self._cert.key_path)
        tickets = self._tickets
        self._server = await serve(
            host,
            port,
            configuration=configuration,
            create_protocol=lambda quic, **kwargs: H3Protocol(quic, server=self, **kwargs),
            session_ticket_fetcher=tickets.pop if tickets is not None else None,
            session_ticket_handler=tickets.add if tickets is not None else None,
        )
        transport = self._server._transport
        assert transport is not None
        sockname = transport.get_extra_info("sockname")
        return str(sockname[0]), int(sockname[1])

    async def close(self, grace_s: float = 2.0) -> None:
        """Close every connection, cancel in-flight handlers, stop listening."""
        for protocol in list(self.protocols):
            protocol.shutdown()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.close()
            self._server = None
