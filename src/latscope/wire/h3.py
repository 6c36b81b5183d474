"""HTTP/3 (RFC 9114) over QUIC (RFC 9000): :class:`H3Client` sends a client's requests over UDP with aioquic.

Everything above the connection is the TCP client's own (:class:`~latscope.wire.client.Client`): the same request
specs and header sets, the same :class:`~latscope.wire.exchange.Exchange` decoding the body with the dialect's
decoder, the same timeouts and watchdog. So an HTTP/3 request fills the same :class:`~latscope.timeline.model.Timeline`
and the waterfall, metrics and checks read it unchanged.

How the phases map onto QUIC (the choice is recorded here because the timeline has no phase of its own for it):

* ``dns`` — ``getaddrinfo``, as over TCP (none for an IP literal).
* ``connect`` — setting up the QUIC connection's state and opening and connecting the UDP socket: no packet is
  exchanged, so it is well under a millisecond. QUIC has no separate transport handshake; the first flight already
  carries the TLS ClientHello.
* ``tls`` — the QUIC handshake: from the first Initial packet to the datagram that completed the TLS 1.3 handshake
  inside QUIC (RFC 9001), one round trip (plus a second when the server asks for address validation). This is the
  number to compare with TCP's connect + tls.
* ``send`` … ``stream`` — as over HTTP/2: HEADERS and DATA frames on one bidirectional stream.

Reads: a read is one UDP datagram, stamped in ``datagram_received`` before aioquic decrypts it; it is recorded in
the timeline of each request whose stream it carried data for, with ``nbytes`` the stream bytes it carried for that
request (decrypted, HTTP/3 framing included), as a TLS read records decrypted bytes.

Connections: one QUIC connection per origin carries every request (streams are multiplexed, as over HTTP/2); a
request with ``new_connection`` opens a fresh one. The session tickets a server sends are kept per origin and
offered on the next new connection, so the second connection shows resumption (``tls_session_resumed``). 0-RTT is
not used: early data would put the request before the handshake's end, and a replayable POST is not safe to send
that way.

A server that does not speak HTTP/3 on that UDP port fails in the ``tls`` phase: at once when the host answers with
ICMP port unreachable (a refused UDP "connection"), after the TLS timeout when nothing answers at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import ssl
from collections.abc import Sequence
from time import monotonic_ns
from typing import Any, cast

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, ErrorCode, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamDataReceived, StreamReset
from aioquic.tls import SessionTicket

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Read, Timeline
from latscope.wire.client import Client
from latscope.wire.connection import Connection, is_ip_literal, resolve
from latscope.wire.errors import WireError, make_error, timeout_error
from latscope.wire.exchange import Exchange
from latscope.wire.models import Origin, OriginStats
from latscope.wire.phase import Sending, Span, budget, protocol_error
from latscope.wire.request import Outgoing

# aioquic logs a failed handshake itself (a warning with the TLS alert); the timeline's error says it already
logging.getLogger("quic").addHandler(logging.NullHandler())

#: the ``http_version`` an HTTP/3 request records
HTTP3 = "HTTP/3"

#: QUIC's CRYPTO_ERROR codes are 0x100 + the TLS alert (RFC 9001 §4.8); 42 is bad_certificate, 48 unknown_ca
_CRYPTO_ERROR = 0x100
_CERT_ALERTS = frozenset({42, 43, 44, 45, 46, 48})

#: connection-specific fields HTTP/3 forbids (RFC 9114 §4.2); ``host`` becomes ``:authority``
_DROPPED_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"})

#: any failure while a request is handed to aioquic: its stream state errors, or the socket refusing the datagram
_h3_error = protocol_error(Exception, "HTTP/3 error while sending")


class _Protocol(QuicConnectionProtocol):
    """aioquic's datagram protocol with a stamp on every datagram, handing each event to its connection."""

    def __init__(self, quic: QuicConnection, owner: Http3Connection) -> None:
        super().__init__(quic)
        self.owner = owner
        self.at_ns = 0  #: the stamp of the datagram being handled

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self.at_ns = monotonic_ns()  # first: the read's stamp is when the datagram reached the client
        self.owner.datagram_started()
        try:
            super().datagram_received(data, addr)
        except Exception as exc:  # an aioquic bug or a state the server forced: the connection is unusable
            owner = self.owner
            phase, kind = (Phase.STREAM, ErrorKind.PROTOCOL) if owner.handshake_done else (Phase.TLS, ErrorKind.TLS)
            owner.broken(make_error(f"QUIC error: {exc!r}", phase=phase, kind=kind), self.at_ns)

    def error_received(self, exc: Exception) -> None:
        # on a connected UDP socket the kernel reports an ICMP port unreachable as ECONNREFUSED
        self.owner.unreachable(exc)

    def quic_event_received(self, event: QuicEvent) -> None:
        self.owner.event(event, self.at_ns)


class Http3Connection:
    """One QUIC connection to an origin carrying any number of HTTP/3 requests, one bidirectional stream each."""

    multiplexed = True

    def __init__(self, origin: Origin, quic: QuicConnection, info: ConnectionInfo) -> None:
        self.origin = origin
        self.info = info
        self.requests = 0
        self.quic = quic
        self.h3 = H3Connection(quic)
        self.protocol = _Protocol(quic, self)
        self.closed = False
        self._streams: dict[int, Exchange] = {}
        self._touched: dict[int, int] = {}  # stream id → index of the current datagram's read in its timeline
        self._handshake: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._close_error: WireError | None = None

    # --- the client's side --------------------------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return not self.closed

    @property
    def handshake_done(self) -> bool:
        """True once the QUIC handshake completed."""
        return self._handshake.done() and not self._handshake.cancelled() and self._handshake.exception() is None

    async def handshake(self, addr: Any, timeout_s: float) -> int:
        """Start the QUIC handshake towards ``addr``; return the stamp of the datagram that completed it."""
        self.protocol.connect(addr)
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(self._handshake)

    async def send(self, request: Outgoing, exchange: Exchange, send_timeout_s: float) -> None:
        """Open a stream and write the request on it (HEADERS, then DATA with the body); marks send_*."""
        method, target, headers, body, _ = request
        t = exchange.timeline
        if self.closed:
            raise self._close_error or make_error(
                "the QUIC connection closed before the request was sent", phase=Phase.SEND, kind=ErrorKind.CLOSED
            )
        origin = self.origin
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", origin.authority.encode()),
            (b":path", target.encode()),
        ]
        for name, value in headers:
            key = name.lower()
            if key not in _DROPPED_HEADERS:
                fields.append((key.encode(), value.encode()))
        self.requests += 1
        with Sending(t, send_timeout_s, len(body), _h3_error) as span:
            stream_id = self.quic.get_next_available_stream_id()
            self._streams[stream_id] = exchange
            span.begin()
            self.h3.send_headers(stream_id, fields, end_stream=not body)
            span.headers_sent()
            if body:
                self.h3.send_data(stream_id, body, end_stream=True)
            self.protocol.transmit()  # the datagrams are handed to the kernel here: a UDP send does not block

    def abandon(self, exchange: Exchange) -> None:
        """Stop delivering to ``exchange`` and cancel its stream (H3_REQUEST_CANCELLED)."""
        for stream_id, ex in list(self._streams.items()):
            if ex is exchange:
                del self._streams[stream_id]
                if not self.closed:
                    # an error here means the stream already ended on both sides: nothing left to cancel
                    with contextlib.suppress(Exception):
                        self.quic.reset_stream(stream_id, ErrorCode.H3_REQUEST_CANCELLED)
                        self.protocol.transmit()
        if not self._handshake.done():
            self.close()

    def close(self) -> None:
        """Close the connection (CONNECTION_CLOSE with H3_NO_ERROR) and its socket."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):  # a connection that never started has nothing to tell the server
                self.protocol.close(error_code=ErrorCode.H3_NO_ERROR)
        transport = self.protocol._transport
        if transport is not None:
            transport.close()

    # --- fed by the protocol ------------------------------------------------------------------------------------

    def datagram_started(self) -> None:
        self._touched.clear()

    def event(self, event: QuicEvent, at_ns: int) -> None:
        if isinstance(event, StreamDataReceived):
            self._record_read(event.stream_id, len(event.data), at_ns)
        elif isinstance(event, HandshakeCompleted):
            info = self.info
            info.alpn = event.alpn_protocol
            info.tls_session_resumed = bool(event.session_resumed)
            if not self._handshake.done():
                self._handshake.set_result(at_ns)
            return
        elif isinstance(event, ConnectionTerminated):
            self._terminated(event)
            return
        elif isinstance(event, StreamReset):
            ex = self._streams.pop(event.stream_id, None)
            if ex is not None:
                phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
                ex.fail(
                    make_error(
                        f"the server reset the HTTP/3 stream (error 0x{event.error_code:x})",
                        phase=phase,
                        kind=ErrorKind.RESET,
                    ),
                    at_ns,
                )
            return
        for h3_event in self.h3.handle_event(event):
            self._h3_event(h3_event, at_ns)

    def _record_read(self, stream_id: int, nbytes: int, at_ns: int) -> None:
        ex = self._streams.get(stream_id)
        if ex is None:
            return  # a control or QPACK stream, or a request that was abandoned
        reads = ex.reads
        index = self._touched.get(stream_id)
        if index is None:
            self._touched[stream_id] = len(reads)
            reads.append(Read(at_ns, nbytes))
            t = ex.timeline
            if t.first_byte_ns is None:
                t.first_byte_ns = at_ns
        else:  # a second STREAM frame for the same request in one datagram: one read, its bytes added up
            reads[index] = Read(at_ns, reads[index].nbytes + nbytes)

    def _h3_event(self, event: H3Event, at_ns: int) -> None:
        if not isinstance(event, HeadersReceived | DataReceived):
            return
        ex = self._streams.get(event.stream_id)
        if ex is None:
            return
        index = self._touched.get(event.stream_id, len(ex.reads) - 1)
        if isinstance(event, HeadersReceived):
            status, fields = _response_fields(event.headers)
            if ex.timeline.status is None:
                if status is None:
                    ex.fail(
                        make_error(
                            "HTTP/3 response without a valid :status", phase=Phase.HEADERS, kind=ErrorKind.PROTOCOL
                        ),
                        at_ns,
                    )
                    self.abandon(ex)
                    return
                if status < 200:
                    return  # an interim response (103 Early Hints …): the final one follows
                ex.response(status, fields, at_ns)
            else:
                ex.trailers(fields)
        elif event.data:
            ex.body(event.data, at_ns, index)
        if event.stream_ended:
            self._streams.pop(event.stream_id, None)
            ex.end(at_ns)

    def unreachable(self, exc: Exception) -> None:
        """The kernel reported the server's port unreachable (ICMP): nothing listens for QUIC there."""
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        where = f"{self.origin.host}:{self.origin.port}"
        error = make_error(
            f"QUIC handshake failed: UDP {where} is unreachable ({reason}): nothing serves HTTP/3 there",
            phase=Phase.TLS,
            kind=ErrorKind.REFUSED,
        )
        self.broken(error, monotonic_ns())

    def broken(self, error: WireError, at_ns: int) -> None:
        """The connection cannot go on: fail the handshake or every request on it with ``error``."""
        if not self._handshake.done():
            self._handshake.set_exception(error)
            self._handshake.exception()  # retrieved here: nobody may be awaiting a handshake that was abandoned
        self._close_error = error
        for ex in list(self._streams.values()):
            phase = ex.timeline.phase_reached() if ex.timeline.status is None else Phase.STREAM
            ex.fail(make_error(error.message, phase=phase, kind=error.kind), at_ns)
        self._streams.clear()
        self.close()

    def _terminated(self, event: ConnectionTerminated) -> None:
        at_ns = monotonic_ns()
        self.closed = True
        code = event.error_code
        reason = f": {event.reason_phrase}" if event.reason_phrase else ""
        if not self._handshake.done():
            if _CRYPTO_ERROR <= code < _CRYPTO_ERROR + 0x100:
                kind = ErrorKind.CERT_VERIFY if code - _CRYPTO_ERROR in _CERT_ALERTS else ErrorKind.TLS
                error = make_error(
                    f"QUIC handshake failed (TLS alert {code - _CRYPTO_ERROR}){reason}", phase=Phase.TLS, kind=kind
                )
            else:
                error = make_error(
                    f"QUIC handshake failed: the connection closed (error 0x{code:x}){reason}",
                    phase=Phase.TLS,
                    kind=ErrorKind.CLOSED,
                )
            self.broken(error, at_ns)
            return
        for ex in list(self._streams.values()):
            err = ex.lost_error(None)
            ex.fail(make_error(f"{err.message} (QUIC error 0x{code:x}{reason})", phase=err.phase, kind=err.kind), at_ns)
        self._streams.clear()
        self.close()


def _response_fields(headers: Sequence[tuple[bytes, bytes]]) -> tuple[int | None, list[tuple[str, str]]]:
    """``(:status, regular fields)`` of a response's field section, names and values as latin-1 text."""
    status: int | None = None
    fields: list[tuple[str, str]] = []
    for name, value in headers:
        if name == b":status":
            text = value.decode("latin-1")
            status = int(text) if text.isdigit() and len(text) == 3 else None
        elif not name.startswith(b":"):
            fields.append((name.decode("latin-1").lower(), value.decode("latin-1")))
    return status, fields


class H3Client(Client):
    """A :class:`~latscope.wire.client.Client` whose requests go over HTTP/3 (QUIC, UDP) to https origins.

    It takes the same arguments (``http2``, ``quickack`` and ``delayed_ack`` have no meaning over QUIC and are
    ignored); ``verify`` and ``ca_file`` check the server's certificate as over TCP.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connections: dict[Origin, Http3Connection] = {}
        self._all: set[Http3Connection] = set()
        self._tickets: dict[Origin, SessionTicket] = {}
        self._opening: dict[Origin, asyncio.Future[None]] = {}  # a connection being opened, per origin
        self._ca_file_ok = False
        self._h3_stats: dict[Origin, OriginStats] = {}

    def stats(self) -> dict[str, OriginStats]:
        return {str(origin): stats for origin, stats in self._h3_stats.items()}

    def forget_tls_sessions(self) -> None:
        self._tickets.clear()

    async def aclose(self) -> None:
        await super().aclose()
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._connections.clear()

    def _prepare_tls(self, url: str) -> None:
        return None  # aioquic verifies certificates itself: no ssl.SSLContext is built

    async def _connection_for(
        self, origin: Origin, t: Timeline, new_connection: bool, deadline_ns: int | None
    ) -> Connection:
        """The origin's QUIC connection, or a new one (``new_connection``, or none is open); ``t.connection`` filled in.
        The TCP client's send and response wait use only ``send()`` and ``abandon()`` of what this returns."""
        if not origin.tls:
            raise make_error(
                f"HTTP/3 needs an https URL (QUIC always encrypts): {origin}",
                phase=Phase.CONNECT,
                kind=ErrorKind.URL,
            )
        stats = self._h3_stats.setdefault(origin, OriginStats())
        conn = None if new_connection else await self._shared(origin)
        if conn is None:
            conn = await self._open_h3(origin, t, deadline_ns, stats)
            reused = False
        else:
            reused = True
            stats.reuses += 1
        t.connection = dataclasses.replace(conn.info, reused=reused, requests_before=conn.requests)
        stats.requests += 1
        return cast(Connection, conn)

    def _keep_session(self, origin: Origin, conn: Connection, t: Timeline) -> None:
        return None  # aioquic hands session tickets to the connection's ticket handler (see _connect)

    async def _shared(self, origin: Origin) -> Http3Connection | None:
        """The origin's open connection; while one is being opened, that one once its handshake is done (the wait
        is the request's pool phase, as for a request waiting for the first HTTP/2 connection); None when there is
        none, or the one being opened failed."""
        opening = self._opening.get(origin)
        if opening is not None:
            await asyncio.shield(opening)  # the opener's connect and TLS limits bound the wait
        conn = self._connections.get(origin)
        return conn if conn is not None and conn.usable else None

    async def _open_h3(
        self, origin: Origin, t: Timeline, deadline_ns: int | None, stats: OriginStats
    ) -> Http3Connection:
        """Resolve, open the UDP socket and do the QUIC handshake, each timed into ``t``; requests to the same
        origin meanwhile wait for it rather than open their own (:meth:`_shared`)."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._opening.setdefault(origin, opened)
        try:
            conn = await self._connect(origin, t, deadline_ns)
        except BaseException:
            stats.connect_failures += 1
            raise
        finally:
            if self._opening.get(origin) is opened:
                del self._opening[origin]
            opened.set_result(None)
        stats.connections_opened += 1
        if conn.info.tls_session_offered:
            stats.tls_sessions_offered += 1
            if conn.info.tls_session_resumed:
                stats.tls_sessions_resumed += 1
        self._connections[origin] = conn
        return conn

    def _check_ca_file(self) -> None:
        """Read ``ca_file`` once, so that an unreadable one fails as the TCP client's does (kind "tls-config")
        rather than deep inside the handshake."""
        if self.ca_file is None or self._ca_file_ok:
            return
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise make_error(
                f"TLS set-up failed (CA file {self.ca_file}): {reason}", phase=Phase.TLS, kind=ErrorKind.TLS_CONFIG
            ) from None
        self._ca_file_ok = True

    async def _connect(self, origin: Origin, t: Timeline, deadline_ns: int | None) -> Http3Connection:
        self._check_ca_file()
        timeouts = self.timeouts
        addresses = await resolve(origin, t, budget(deadline_ns, timeouts.connect_s)[0])
        family, _, _, sockaddr = addresses[0]
        addr: Any = sockaddr
        loop = asyncio.get_running_loop()
        # connect: the QUIC connection's state (keys for the Initial packets) and the UDP socket; no packet yet
        connecting = Span(t, Phase.CONNECT, lambda exc: _udp_error(exc, origin), start=False)
        connecting.begin()
        conn = self._new_connection(origin)
        with connecting:
            transport, _ = await loop.create_datagram_endpoint(lambda: conn.protocol, remote_addr=addr, family=family)
        self._all.add(conn)
        info = conn.info
        local = transport.get_extra_info("sockname")
        remote = transport.get_extra_info("peername")
        if local is not None:
            info.local_address, info.local_port = local[0], local[1]
        if remote is not None:
            info.remote_address, info.remote_port = remote[0], remote[1]

        def failed(exc: BaseException) -> WireError | None:
            conn.close()
            self._all.discard(conn)
            if isinstance(exc, TimeoutError):
                return timeout_error(
                    Phase.TLS,
                    f"QUIC handshake with {origin.host}:{origin.port} took longer than {limit_s:g} s (no HTTP/3 "
                    "server answered on that UDP port)",
                )
            return None

        with Span(t, Phase.TLS, failed) as handshaking:
            limit_s, _ = budget(deadline_ns, timeouts.tls_s)
            handshaking.end_ns = await conn.handshake(remote if remote is not None else addr, limit_s)
        return conn

    def _new_connection(self, origin: Origin) -> Http3Connection:
        """A QUIC connection to ``origin`` not yet started: its configuration, offering the origin's saved session
        ticket and keeping the ones the server sends."""
        timeouts = self.timeouts
        configuration = QuicConfiguration(
            is_client=True,
            alpn_protocols=list(H3_ALPN),
            server_name=origin.host,
            verify_mode=ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE,
            cafile=self.ca_file,
            idle_timeout=max(timeouts.read_s, timeouts.headers_s),  # the client's own timeouts decide, not QUIC's
        )
        if is_ip_literal(origin.host):
            configuration.server_name = origin.host  # aioquic checks an IP literal against the IP SANs
        ticket = self._tickets.get(origin)
        configuration.session_ticket = ticket

        def keep_ticket(new: SessionTicket) -> None:
            self._tickets[origin] = new

        quic = QuicConnection(configuration=configuration, session_ticket_handler=keep_ticket)
        info = ConnectionInfo(
            connection_id=_next_id(),
            reused=False,
            http_version=HTTP3,
            tls_version="TLSv1.3",  # QUIC carries TLS 1.3 only (RFC 9001 §4.2)
            tls_session_offered=ticket is not None,
        )
        return Http3Connection(origin, quic, info)


def _udp_error(exc: BaseException, origin: Origin) -> WireError | None:
    """Map a UDP socket that could not be opened onto a connect error; None for anything else."""
    if isinstance(exc, OSError):
        return make_error(
            f"opening a UDP socket to {origin.host}:{origin.port} failed: {exc.strerror or exc}",
            phase=Phase.CONNECT,
            kind=ErrorKind.CONNECT,
        )
    return None


#: ids of HTTP/3 connections, counted from 1 in this process (an H3Client has no TCP pool to share ids with)
_next_id = itertools.count(1).__next__
