"""A client whose new connections start in delayed-ACK mode: the ACK state of a reused keep-alive connection.

Nagle's algorithm on a server only holds a small write while an earlier one is unacknowledged, so it shows when the
client delays its ACKs. Linux ACKs at once on a fresh connection (quick-ACK mode for its first segments) and delays
ACKs once a request/response exchange has made the connection interactive ("pingpong" mode) — which is why Nagle
shows on reused connections only (reference/network-timing.md). ``setsockopt(TCP_QUICKACK, 0)`` enters that mode
directly (Linux ``tcp(7)``: "if not set, … delayed ACK mode"), so a fresh connection behaves like a reused one. That
lets the streaming experiment test for Nagle even on a server that closes every connection, where it is masked today
but appears as soon as keep-alive works.

XX: this reaches the socket through the client's connection opener; a public ``Client(delayed_ack=True)`` option in
``latscope.wire`` would be the clean seam (requested from the wire owners).
"""

from __future__ import annotations

import socket

from latscope.timeline.model import Timeline
from latscope.wire import Client
from latscope.wire.connection import Connection
from latscope.wire.models import Origin

_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def delayed_ack_supported() -> bool:
    """True where the kernel lets a client switch quick ACKs off (Linux)."""
    return _TCP_QUICKACK is not None


class DelayedAckClient(Client):
    """A :class:`~latscope.wire.Client` that puts every connection it opens into delayed-ACK mode before the request
    is written. ``applied`` counts the connections it could switch (0 where the platform or the client's internals
    do not allow it: the experiment then reports the condition as not run)."""

    applied: int = 0

    async def _open(self, origin: Origin, t: Timeline, deadline_ns: int | None) -> Connection:
        conn = await super()._open(origin, t, deadline_ns)
        sock = getattr(getattr(conn, "protocol", None), "sock", None)
        if _TCP_QUICKACK is not None and isinstance(sock, socket.socket):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 0)
            except OSError:
                return conn
            self.applied += 1
        return conn
