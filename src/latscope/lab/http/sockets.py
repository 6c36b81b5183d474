"""Socket options the edge stage controls on an accepted connection."""

from __future__ import annotations

import asyncio
import socket


def set_nodelay(transport: asyncio.BaseTransport, enabled: bool) -> bool:
    """Set TCP_NODELAY on the transport's socket; return what the socket reports afterwards.

    asyncio and uvloop switch TCP_NODELAY on for every TCP connection, so the ``nagle`` fault has to switch it off
    explicitly (reference/network-timing.md). Returns ``enabled`` unchanged when the transport has no TCP socket
    (a Unix socket in a test, say): there is no Nagle to control there.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return enabled
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if enabled else 0)
        return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    except OSError:
        return enabled  # the peer already reset the connection; nothing will be written anyway


def peer_name(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the peer, or "?" when the transport does not know it."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return "?"
