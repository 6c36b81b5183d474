"""The listening side: accept TCP connections, finish TLS, choose HTTP/1.1 or HTTP/2, hand over to a session.

TLS listeners accept in a loop of their own and wrap each socket with ``loop.connect_accepted_socket(ssl=...)``
rather than passing one fixed ``ssl=`` context to ``create_server``, so that each handshake can use the context
:class:`~latscope.lab.tls.ServerTls` hands out — a fresh one per connection when session resumption is switched off
(see :mod:`latscope.lab.tls` for why a fresh context is needed). (``loop.start_tls`` from ``connection_made`` would
do the same on asyncio, but uvloop starts reading right after ``connection_made`` even when the protocol paused
reading, so the ClientHello would reach the plain protocol instead of the TLS one.)

Protocol choice: over TLS, ALPN decides (``h2`` → HTTP/2, anything else → HTTP/1.1). Over cleartext with HTTP/2
enabled, the first bytes decide: the HTTP/2 connection preface (prior knowledge, RFC 9113 §3.3) selects HTTP/2,
anything else is HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from dataclasses import dataclass, field
from typing import cast

from latscope.lab.http.exchange import ConnectionInfo, Handler
from latscope.lab.http.http1 import H1Session
from latscope.lab.http.http2 import H2Session
from latscope.lab.http.limits import ConnectionLimits
from latscope.lab.http.session import Session, SessionConfig, logger, now_ns
from latscope.lab.http.sockets import peer_name, set_nodelay
from latscope.lab.http.streams import ConnectionCounter
from latscope.lab.tls import ALPN_H2, ServerTls

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: Pending connections the kernel queues before ``accept``: load tests open hundreds of connections at once.
BACKLOG = 1024
#: Pause after a failed accept (out of file descriptors …) before trying again, s.
ACCEPT_BACKOFF_S = 0.05


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Edge-stage behaviour of the listener."""

    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    keep_alive: bool = True  #: False: every response closes its connection (``no-keepalive``)
    nodelay: bool = True  #: TCP_NODELAY on accepted sockets; False lets Nagle's algorithm hold small writes
    http2: bool = True  #: offer h2 in ALPN and accept cleartext prior knowledge
    tls: ServerTls | None = None  #: None: plain TCP
    #: SO_REUSEPORT on the listener: several lab processes bind one port and the kernel spreads the connections
    #: among them (``latscope lab --replicas``; Linux and the BSDs)
    reuse_port: bool = False


class _Connection(asyncio.Protocol):
    """The protocol object of one accepted connection; forwards everything to its session once one is chosen."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._session: Session | None = None
        self._transport: asyncio.Transport | None = None
        self._early: list[bytes] = []  # bytes read before the session exists (preface sniffing, post-handshake data)
        self._lost = False
        self.info: ConnectionInfo | None = None
        self._sniff_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TLS transport does not subclass asyncio.Transport, but it is one in every way the sessions use.
        transport = cast(asyncio.Transport, transport)
        options = self._server.options
        nodelay = set_nodelay(transport, options.nodelay)
        self.info = ConnectionInfo(
            connection_id=self._server.next_connection_id(),
            peer=peer_name(transport),
            opened_ns=now_ns(),
            nodelay=nodelay,
        )
        self._server.connections.add(self)
        self._transport = transport
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            # TLS: the handshake is complete by now; ALPN picks the protocol.
            alpn = ssl_object.selected_alpn_protocol()
            self.info.tls = True
            self.info.alpn = alpn
            self.info.tls_version = ssl_object.version()
            self.info.session_reused = bool(ssl_object.session_reused)
            self._begin(H2Session if alpn == ALPN_H2 else H1Session)
        elif not options.http2:
            self._begin(H1Session)
        else:
            # Until the first bytes say which protocol it is, the header timeout still applies (slowloris).
            self._sniff_timer = asyncio.get_running_loop().call_later(options.limits.header_timeout_s, transport.close)

    def _begin(self, kind: type[H1Session] | type[H2Session]) -> None:
        assert self._transport is not None and self.info is not None
        if self._sniff_timer is not None:
            self._sniff_timer.cancel()
            self._sniff_timer = None
        self._session = kind(self._transport, self.info, self._server.session_config, self._session_closed)
        early, self._early = self._early, []
        for data in early:
            self._session.data_received(data)

    def data_received(self, data: bytes) -> None:
        session = self._session
        if session is not None:
            session.data_received(data)
            return
        self._early.append(data)
        seen = b"".join(self._early)
        if seen[: len(H2_PREFACE)] == H2_PREFACE[: len(seen)] and len(seen) < len(H2_PREFACE):
            return  # could still be the HTTP/2 preface: wait for more
        self._begin(H2Session if seen.startswith(H2_PREFACE) else H1Session)

    def eof_received(self) -> bool | None:
        if self._session is not None:
            return self._session.eof_received()
        return None

    def pause_writing(self) -> None:
        if self._session is not None:
            self._session.pause_writing()

    def resume_writing(self) -> None:
        if self._session is not None:
            self._session.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._session is not None:
            self._session.connection_lost(exc)
        self._forget()

    def _session_closed(self, session: Session) -> None:
        self._forget()

    def _forget(self) -> None:
        if self._sniff_timer is not None:
            self._sniff_timer.cancel()
            self._sniff_timer = None
        self._server.connections.discard(self)

    def shutdown(self) -> None:
        """Server stop: end the session (cancelling handlers) or drop a connection that never got one."""
        if self._session is not None:
            self._session.shutdown()
        elif self._transport is not None:
            self._transport.close()

    def tasks(self) -> list[asyncio.Task[None]]:
        return list(self._session._tasks) if self._session is not None else []


class HttpServer(ConnectionCounter):
    """A listening socket serving ``handler`` over HTTP/1.1 and HTTP/2, plain or TLS."""

    def __init__(self, handler: Handler, options: ServerOptions) -> None:
        self.options = options
        self.session_config = SessionConfig(handler=handler, limits=options.limits, keep_alive=options.keep_alive)
        self.connections: set[_Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen; return the bound (host, port) — port 0 binds an ephemeral port."""
        loop = asyncio.get_running_loop()
        if self.options.tls is None:
            self._server = await loop.create_server(
                lambda: _Connection(self),
                host,
                port,
                reuse_address=True,
                reuse_port=self.options.reuse_port or None,
                backlog=BACKLOG,
            )
            sockname = self._server.sockets[0].getsockname()
        else:
            self._listener = _listen(host, port, reuse_port=self.options.reuse_port)
            self._accepting = loop.create_task(self._accept_tls(self._listener, self.options.tls))
            sockname = self._listener.getsockname()
        return str(sockname[0]), int(sockname[1])

    async def _accept_tls(self, listener: socket.socket, tls: ServerTls) -> None:
        loop = asyncio.get_running_loop()
        while True:  # until close() cancels this task
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:
                # EMFILE and friends: back off briefly instead of spinning; the backlog holds the clients meanwhile.
                logger.warning("lab accept failed: %s", exc)
                await asyncio.sleep(ACCEPT_BACKOFF_S)
                continue
            task = loop.create_task(self._handshake(sock, tls))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, sock: socket.socket, tls: ServerTls) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _Connection(self),
                sock,
                ssl=tls.context_for_connection(),
                ssl_handshake_timeout=self.options.limits.header_timeout_s,
            )
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError, asyncio.CancelledError):
            # A failed or abandoned handshake (not TLS at all, client hung up, timeout, server stopping): nothing
            # to answer, only a socket to release.
            sock.close()

    async def close(self, grace_s: float = 2.0) -> None:
        """Stop accepting, cancel in-flight handlers, close every connection; wait up to ``grace_s`` for handlers."""
        if self._server is not None:
            self._server.close()
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        connections = list(self.connections)
        tasks = [task for conn in connections for task in conn.tasks()] + list(self._handshakes)
        for conn in connections:
            conn.shutdown()
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            if pending:
                logger.warning("%d lab handlers did not stop within %.1f s", len(pending), grace_s)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), grace_s)
            self._server = None


def _listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A non-blocking listening TCP socket on the first address ``host`` resolves to."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
