"""Opening a connection: DNS, TCP connect and TLS, each timed into the timeline, then the HTTP layer ALPN chose.

The phases are done by hand rather than by ``loop.create_connection(host, port, ssl=...)`` because that call folds
DNS, connect and TLS into one await and never offers a saved TLS session (reference/network-timing.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
import ssl
from typing import Protocol

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Timeline
from latscope.wire.errors import WireError, connect_error, dns_error, make_error, tls_error
from latscope.wire.exchange import Exchange
from latscope.wire.http2 import HTTP2Connection
from latscope.wire.http11 import HTTP11Connection
from latscope.wire.kstamps import enable as enable_kernel_stamps
from latscope.wire.models import Origin, Timeouts
from latscope.wire.phase import Span, budget, phase_timeout, total_timeout
from latscope.wire.rawsock import StampedSocket
from latscope.wire.request import Outgoing
from latscope.wire.tcpinfo import set_delayed_ack
from latscope.wire.tls import ALPN_H2, SessionCache
from latscope.wire.transport import WireProtocol

_connection_ids = itertools.count(1)

#: one address to connect to: ``(family, socket type, protocol, sockaddr)`` as ``getaddrinfo`` gives it
Address = tuple[socket.AddressFamily, socket.SocketKind, int, tuple[str, int] | tuple[str, int, int, int]]


class Connection(Protocol):
    """What the pool and the client need from an HTTP/1.1 or HTTP/2 connection."""

    origin: Origin
    info: ConnectionInfo  #: facts fixed at connect time (copied into each request's timeline)
    protocol: WireProtocol
    requests: int  #: requests started on this connection so far
    multiplexed: bool  #: True for HTTP/2 (several requests at once)

    @property
    def available(self) -> bool:
        """True when a new request could start on it now."""

    @property
    def usable(self) -> bool:
        """True while it is open and may carry more requests."""

    @property
    def is_open(self) -> bool:
        """True until the connection closed (it counts against the per-origin limit until then)."""

    def reserve(self) -> None:
        """Claim a request slot (called by the pool when handing the connection out)."""

    async def send(self, request: Outgoing, exchange: Exchange, send_timeout_s: float) -> None:
        """Write ``request`` within ``send_timeout_s`` s and attach ``exchange`` to receive its response; marks
        send_* in the timeline."""

    def abandon(self, exchange: Exchange) -> None:
        """The caller gave up on ``exchange`` (timeout, cancel): stop delivering to it; close when needed."""

    def close(self) -> None:
        """Close the connection."""


def is_ip_literal(host: str) -> bool:
    """True when ``host`` is an IPv4 or IPv6 address (no DNS lookup)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def resolve(origin: Origin, t: Timeline, timeout_s: float) -> list[Address]:
    """Addresses for ``origin`` via ``getaddrinfo`` (timed as the dns phase, within ``timeout_s`` seconds); IP literals
    skip DNS entirely."""
    host, port = origin.host, origin.port
    if is_ip_literal(host):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        addr: tuple[str, int] | tuple[str, int, int, int] = (host, port, 0, 0) if ":" in host else (host, port)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, addr)]
    loop = asyncio.get_running_loop()
    with Span(t, Phase.DNS, lambda exc: dns_error(exc, host, timeout_s)):
        async with asyncio.timeout(timeout_s):  # not wait_for: that would run the lookup as a task of its own
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise make_error(f"DNS lookup of {host} returned no addresses", phase=Phase.DNS, kind=ErrorKind.DNS)
    # AF_INET/AF_INET6 only: getaddrinfo for a TCP host:port never yields other families
    return [(family, kind, proto, sockaddr[:4]) for family, kind, proto, _, sockaddr in infos]  # type: ignore[misc]


async def open_connection(
    origin: Origin,
    t: Timeline,
    *,
    ssl_context: ssl.SSLContext | None,
    sessions: SessionCache,
    timeouts: Timeouts,
    deadline_ns: int | None,
    quickack: bool,
    delayed_ack: bool = False,
    stamps: str = "user",
) -> Connection:
    """Resolve, connect and (for https) handshake, recording each phase in ``t``; return the HTTP connection.

    ``deadline_ns`` is the request's total deadline (monotonic ns): a phase that runs into it fails with a "total
    timeout" error naming itself. ``quickack`` ACKs every read at once; ``delayed_ack`` puts the new connection in
    delayed-ACK mode instead (see :func:`~latscope.wire.tcpinfo.set_delayed_ack`). ``stamps="kernel"`` reads the
    socket itself with the kernel's receive stamps (:mod:`latscope.wire.rawsock`) where the platform gives them, and
    through an asyncio transport with user-space stamps where it does not (``ConnectionInfo.stamps`` says which,
    ``kernel_stamps_refused`` that kernel stamps were refused). Raises
    :class:`~latscope.wire.errors.WireError` naming the phase that failed; the marks of the phases that ran stay in
    ``t``.
    """
    addresses = await _resolve_within(origin, t, timeouts, deadline_ns)
    sock, kernel = await _connect_socket(origin, t, addresses, timeouts, deadline_ns, kernel_stamps=stamps == "kernel")
    # before the first byte is sent or received, so even the first response segment is ACKed in that mode
    delayed = delayed_ack and not quickack and set_delayed_ack(sock)
    protocol = await _attach_transport(origin, sock, WireProtocol(sock, quickack=quickack, delayed_ack=delayed), kernel)
    info = _connection_info(sock, quickack=quickack, delayed_ack=delayed, kernel=kernel, stamps=stamps)
    alpn: str | None = None
    if origin.tls:
        assert ssl_context is not None
        alpn = await _handshake(origin, t, protocol, info, ssl_context, sessions, timeouts, deadline_ns)
    return _http_connection(origin, protocol, info, alpn)


def _http_connection(origin: Origin, protocol: WireProtocol, info: ConnectionInfo, alpn: str | None) -> Connection:
    """The HTTP layer the handshake's ALPN chose: HTTP/2 for ``h2``, else HTTP/1.1."""
    if alpn == ALPN_H2:
        info.http_version = "HTTP/2"
        return HTTP2Connection(origin, protocol, info)
    info.http_version = "HTTP/1.1"
    return HTTP11Connection(origin, protocol, info)


async def _resolve_within(origin: Origin, t: Timeline, timeouts: Timeouts, deadline_ns: int | None) -> list[Address]:
    """:func:`resolve` within the connect limit, or what is left of the total one when that is less."""
    limit_s, total = budget(deadline_ns, timeouts.connect_s)
    try:
        return await resolve(origin, t, limit_s)
    except WireError as err:
        if err.kind is ErrorKind.TIMEOUT and total:
            raise total_timeout(timeouts.total_s, Phase.DNS) from None
        raise


async def _connect_socket(
    origin: Origin,
    t: Timeline,
    addresses: list[Address],
    timeouts: Timeouts,
    deadline_ns: int | None,
    *,
    kernel_stamps: bool,
) -> tuple[socket.socket, bool]:
    """The TCP connect phase: each address in turn until one connects; ``(socket, kernel stamps enabled on it)``."""
    loop = asyncio.get_running_loop()
    last_exc: OSError | None = None
    with Span(t, Phase.CONNECT):
        for family, kind, proto, sockaddr in addresses:
            candidate = socket.socket(family, kind, proto)
            candidate.setblocking(False)
            # asyncio transports set TCP_NODELAY themselves; setting it before connect keeps it uniform on both loops
            candidate.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # before connect, so the handshake's segments already come stamped
            kernel = kernel_stamps and enable_kernel_stamps(candidate)
            limit_s, total = budget(deadline_ns, timeouts.connect_s)
            try:
                async with asyncio.timeout(limit_s):
                    await loop.sock_connect(candidate, sockaddr)
            except TimeoutError:
                candidate.close()
                where = f"{origin.host}:{origin.port}"
                raise phase_timeout(
                    Phase.CONNECT,
                    total,
                    timeouts.total_s,
                    f"TCP connect to {where} took longer than {timeouts.connect_s:g} s",
                ) from None
            except OSError as exc:
                candidate.close()
                last_exc = exc
                continue
            except BaseException:
                candidate.close()
                raise
            return candidate, kernel
    assert last_exc is not None
    try:
        raise connect_error(last_exc, origin.host, origin.port)
    finally:
        # the OSError's traceback holds this frame: drop it, or frame and error form a cycle that only the cyclic
        # collector frees (which the load generator keeps off while it measures)
        last_exc = None


async def _attach_transport(origin: Origin, sock: socket.socket, protocol: WireProtocol, kernel: bool) -> WireProtocol:
    """Hand the connected ``sock`` to ``protocol``: read by :class:`StampedSocket` itself for kernel stamps, else
    through an asyncio transport."""
    try:
        if kernel:
            StampedSocket(asyncio.get_running_loop(), sock, protocol)
        else:
            await asyncio.get_running_loop().create_connection(lambda: protocol, sock=sock)
    except OSError as exc:
        sock.close()
        raise connect_error(exc, origin.host, origin.port) from None
    except BaseException:
        sock.close()
        raise
    return protocol


def _connection_info(
    sock: socket.socket, *, quickack: bool, delayed_ack: bool, kernel: bool, stamps: str
) -> ConnectionInfo:
    """The facts of a new connection on ``sock``: its id, addresses, ACK mode and read stamps."""
    local = sock.getsockname()
    remote = sock.getpeername()
    return ConnectionInfo(
        connection_id=next(_connection_ids),
        reused=False,
        local_address=local[0],
        local_port=local[1],
        remote_address=remote[0],
        remote_port=remote[1],
        quickack=quickack,
        delayed_ack=delayed_ack,
        stamps="kernel" if kernel else "user",
        kernel_stamps_refused=stamps == "kernel" and not kernel,
    )


async def _handshake(
    origin: Origin,
    t: Timeline,
    protocol: WireProtocol,
    info: ConnectionInfo,
    ssl_context: ssl.SSLContext,
    sessions: SessionCache,
    timeouts: Timeouts,
    deadline_ns: int | None,
) -> str | None:
    """The TLS phase, offering the origin's saved session; fills ``info``'s TLS facts and returns the ALPN
    protocol the server chose."""
    session = sessions.get(origin)
    info.tls_session_offered = session is not None

    def failed(exc: BaseException) -> WireError | None:
        protocol.abort()  # whatever failed (cancelled too), the half-open connection is nobody's now
        if isinstance(exc, TimeoutError):
            return phase_timeout(
                Phase.TLS, total, timeouts.total_s, f"TLS handshake took longer than {timeouts.tls_s:g} s"
            )
        if isinstance(exc, (OSError, ssl.SSLError, EOFError)):
            # the handshake future keeps the error, and the error's traceback this frame: break the cycle
            exc.__traceback__ = None
            return tls_error(exc)
        return None

    # the handshake's last step ran inside data_received; its own stamp is more exact than this await's
    span = Span(t, Phase.TLS, failed, start=False, stamp=lambda: protocol.handshake_done_ns)
    span.begin()
    limit_s, total = budget(deadline_ns, timeouts.tls_s)
    handshake = protocol.start_tls(ssl_context, origin.host, session)
    with span:
        async with asyncio.timeout(limit_s):
            await handshake
    ssl_object = protocol.ssl_object
    assert ssl_object is not None
    alpn = ssl_object.selected_alpn_protocol()
    cipher = ssl_object.cipher()
    info.alpn = alpn
    info.tls_version = ssl_object.version()
    info.tls_cipher = cipher[0] if cipher else None
    info.tls_session_resumed = ssl_object.session_reused
    return alpn
