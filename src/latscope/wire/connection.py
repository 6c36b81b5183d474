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
from time import monotonic_ns
from typing import Protocol

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Timeline
from latscope.wire.errors import WireError, connect_error, make_error, timeout_error, tls_error
from latscope.wire.exchange import Exchange
from latscope.wire.http2 import HTTP2Connection
from latscope.wire.http11 import HTTP11Connection
from latscope.wire.kstamps import enable as enable_kernel_stamps
from latscope.wire.models import Origin, Timeouts
from latscope.wire.rawsock import StampedSocket
from latscope.wire.request import Outgoing
from latscope.wire.tcpinfo import set_delayed_ack
from latscope.wire.tls import ALPN_H2, SessionCache
from latscope.wire.transport import WireProtocol

_connection_ids = itertools.count(1)


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


def _remaining(deadline_ns: int | None, limit_s: float) -> float:
    if deadline_ns is None:
        return limit_s
    return max(0.0, min(limit_s, (deadline_ns - monotonic_ns()) / 1e9))


def _total_limits(deadline_ns: int | None, limit_s: float) -> bool:
    """True when the request's total deadline, not the phase's own limit, is what a timeout now would mean."""
    return deadline_ns is not None and (deadline_ns - monotonic_ns()) / 1e9 < limit_s


def _total_timeout(timeouts: Timeouts, phase: Phase) -> WireError:
    return timeout_error(phase, f"total timeout of {timeouts.total_s:g} s exceeded during {phase}")


async def resolve(
    origin: Origin, t: Timeline, timeout_s: float
) -> list[tuple[socket.AddressFamily, socket.SocketKind, int, tuple[str, int] | tuple[str, int, int, int]]]:
    """Addresses for ``origin`` via ``getaddrinfo`` (timed as the dns phase); IP literals skip DNS entirely."""
    host, port = origin.host, origin.port
    if is_ip_literal(host):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        addr: tuple[str, int] | tuple[str, int, int, int] = (host, port, 0, 0) if ":" in host else (host, port)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, addr)]
    loop = asyncio.get_running_loop()
    t.dns_start_ns = monotonic_ns()
    try:
        async with asyncio.timeout(timeout_s):  # not wait_for: that would run the lookup as a task of its own
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise make_error(f"DNS lookup of {host} failed: {exc.strerror}", phase=Phase.DNS, kind=ErrorKind.DNS) from None
    except TimeoutError:
        raise timeout_error(Phase.DNS, f"DNS lookup of {host} took longer than {timeout_s:g} s") from None
    finally:
        t.dns_end_ns = monotonic_ns()
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
    loop = asyncio.get_running_loop()
    total_limits = _total_limits(deadline_ns, timeouts.connect_s)
    try:
        addresses = await resolve(origin, t, _remaining(deadline_ns, timeouts.connect_s))
    except WireError as err:
        if err.kind is ErrorKind.TIMEOUT and total_limits:
            raise _total_timeout(timeouts, Phase.DNS) from None
        raise

    t.connect_start_ns = monotonic_ns()
    kernel = False
    sock: socket.socket | None = None
    last_exc: OSError | None = None
    try:
        for family, kind, proto, sockaddr in addresses:
            candidate = socket.socket(family, kind, proto)
            candidate.setblocking(False)
            # asyncio transports set TCP_NODELAY themselves; setting it before connect keeps it uniform on both loops
            candidate.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # before connect, so the handshake's segments already come stamped
            kernel = stamps == "kernel" and enable_kernel_stamps(candidate)
            total_limits = _total_limits(deadline_ns, timeouts.connect_s)
            try:
                async with asyncio.timeout(_remaining(deadline_ns, timeouts.connect_s)):
                    await loop.sock_connect(candidate, sockaddr)
            except TimeoutError:
                candidate.close()
                if total_limits:
                    raise _total_timeout(timeouts, Phase.CONNECT) from None
                where = f"{origin.host}:{origin.port}"
                raise timeout_error(
                    Phase.CONNECT, f"TCP connect to {where} took longer than {timeouts.connect_s:g} s"
                ) from None
            except OSError as exc:
                candidate.close()
                last_exc = exc
                continue
            except BaseException:
                candidate.close()
                raise
            sock = candidate
            break
    finally:
        t.connect_end_ns = monotonic_ns()
    if sock is None:
        assert last_exc is not None
        try:
            raise connect_error(last_exc, origin.host, origin.port)
        finally:
            # the OSError's traceback holds this frame: drop it, or frame and error form a cycle that only the
            # cyclic collector frees (which the load generator keeps off while it measures)
            last_exc = None

    # before the first byte is sent or received, so even the first response segment is ACKed in that mode
    delayed = delayed_ack and not quickack and set_delayed_ack(sock)
    protocol = WireProtocol(sock, quickack=quickack, delayed_ack=delayed)
    try:
        if kernel:
            StampedSocket(loop, sock, protocol)
        else:
            await loop.create_connection(lambda: protocol, sock=sock)
    except OSError as exc:
        sock.close()
        raise connect_error(exc, origin.host, origin.port) from None
    except BaseException:
        sock.close()
        raise
    local = sock.getsockname()
    remote = sock.getpeername()
    info = ConnectionInfo(
        connection_id=next(_connection_ids),
        reused=False,
        local_address=local[0],
        local_port=local[1],
        remote_address=remote[0],
        remote_port=remote[1],
        quickack=quickack,
        delayed_ack=delayed,
        stamps="kernel" if kernel else "user",
        kernel_stamps_refused=stamps == "kernel" and not kernel,
    )

    alpn: str | None = None
    if origin.tls:
        assert ssl_context is not None
        session = sessions.get(origin)
        info.tls_session_offered = session is not None
        t.tls_start_ns = monotonic_ns()
        total_limits = _total_limits(deadline_ns, timeouts.tls_s)
        handshake = protocol.start_tls(ssl_context, origin.host, session)
        try:
            async with asyncio.timeout(_remaining(deadline_ns, timeouts.tls_s)):
                await handshake
        except TimeoutError:
            protocol.abort()
            if total_limits:
                raise _total_timeout(timeouts, Phase.TLS) from None
            raise timeout_error(Phase.TLS, f"TLS handshake took longer than {timeouts.tls_s:g} s") from None
        except (OSError, ssl.SSLError, EOFError) as exc:
            protocol.abort()
            # the handshake future keeps the error, and the error's traceback this frame: break the cycle
            exc.__traceback__ = None
            raise tls_error(exc) from None
        except BaseException:  # cancelled: the half-open connection is nobody's now
            protocol.abort()
            raise
        finally:
            # the handshake's last step ran inside data_received; its own stamp is more exact than this await's
            t.tls_end_ns = protocol.handshake_done_ns or monotonic_ns()
        ssl_object = protocol.ssl_object
        assert ssl_object is not None
        alpn = ssl_object.selected_alpn_protocol()
        cipher = ssl_object.cipher()
        info.alpn = alpn
        info.tls_version = ssl_object.version()
        info.tls_cipher = cipher[0] if cipher else None
        info.tls_session_resumed = ssl_object.session_reused
    if alpn == ALPN_H2:
        info.http_version = "HTTP/2"
        return HTTP2Connection(origin, protocol, info)
    info.http_version = "HTTP/1.1"
    return HTTP11Connection(origin, protocol, info)
