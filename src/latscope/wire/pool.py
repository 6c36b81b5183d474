"""The connection pool: connections per origin, reuse accounting, a cap per origin and a wait when it is reached.

Reuse is the point of a pool and also a thing latscope measures (``no-connection-reuse``), so every hand-out is
accounted for: the timeline's :class:`~latscope.timeline.model.ConnectionInfo` says whether the connection was new or
reused and how many requests it carried before, and :class:`~latscope.wire.models.OriginStats` sums it up per origin.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Awaitable, Callable
from time import monotonic_ns
from typing import Any

from latscope.timeline.model import Phase, Timeline
from latscope.wire.connection import Connection
from latscope.wire.errors import WireError, timeout_error
from latscope.wire.models import Origin, OriginStats

#: ``opener(origin, timeline, deadline_ns)`` opens one connection, timing its phases into the timeline.
Opener = Callable[[Origin, Timeline, "int | None"], Awaitable[Connection]]


class ConnectionPool:
    """Connections per origin, at most ``max_per_origin`` open at once (``new_connection`` requests may exceed it).

    HTTP/1.1 connections carry one request at a time and go back to the pool when the response ended on a reusable
    connection (most recently used first). HTTP/2 connections are shared while they have stream capacity. While an
    https origin's protocol is still unknown and a connection to it is being opened, other requests wait for it
    rather than open their own: if it speaks h2, they all share it, as a browser would.
    """

    def __init__(self, opener: Opener, *, max_per_origin: int, may_multiplex: bool) -> None:
        self._opener = opener
        self._max = max_per_origin
        self._may_multiplex = may_multiplex
        self._conns: dict[Origin, list[Connection]] = {}
        self._opening: dict[Origin, int] = {}
        self._multiplexed: dict[Origin, bool] = {}  #: what an origin's connections turned out to speak
        self._waiters: dict[Origin, deque[asyncio.Future[None]]] = {}
        self.stats: dict[Origin, OriginStats] = {}

    async def acquire(
        self, origin: Origin, t: Timeline, *, new_connection: bool = False, deadline_ns: int | None = None
    ) -> Connection:
        """A connection for one request to ``origin``, its slot reserved; ``t.connection`` is filled in."""
        stats = self.stats.setdefault(origin, OriginStats())
        while True:
            if not new_connection:
                conn = self._find(origin)
                if conn is not None:
                    return self._hand_out(conn, t, stats, reused=True)
            opening = self._opening.get(origin, 0)
            probing = opening > 0 and self._may_multiplex and origin.tls and origin not in self._multiplexed
            if new_connection or (not probing and self._count(origin) + opening < self._max):
                conn = await self._open(origin, t, stats, deadline_ns)
                return self._hand_out(conn, t, stats, reused=False)
            await self._wait(origin, deadline_ns)

    def _hand_out(self, conn: Connection, t: Timeline, stats: OriginStats, *, reused: bool) -> Connection:
        before = conn.requests
        conn.reserve()
        t.connection = dataclasses.replace(conn.info, reused=reused, requests_before=before)
        stats.requests += 1
        if before > 0:
            stats.reuses += 1
        return conn

    async def _open(self, origin: Origin, t: Timeline, stats: OriginStats, deadline_ns: int | None) -> Connection:
        self._opening[origin] = self._opening.get(origin, 0) + 1
        try:
            conn = await self._opener(origin, t, deadline_ns)
        except BaseException as exc:
            if isinstance(exc, WireError):
                stats.connect_failures += 1
            self._wake(origin, everyone=True)
            raise
        finally:
            self._opening[origin] -= 1
        stats.connections_opened += 1
        if conn.info.tls_session_offered:
            stats.tls_sessions_offered += 1
            if conn.info.tls_session_resumed:
                stats.tls_sessions_resumed += 1
        self._multiplexed[origin] = conn.multiplexed
        self._conns.setdefault(origin, []).append(conn)
        conn_any: Any = conn
        conn_any.on_release = self._released
        self._wake(origin, everyone=True)  # requests waiting to learn the protocol can look again
        return conn

    def _find(self, origin: Origin) -> Connection | None:
        conns = self._conns.get(origin)
        if not conns:
            return None
        for conn in reversed(conns):  # most recently opened/returned first: the warmest connection
            if conn.available:
                return conn
        return None

    def _count(self, origin: Origin) -> int:
        conns = self._conns.get(origin)
        if not conns:
            return 0
        alive = [c for c in conns if c.is_open]
        if len(alive) != len(conns):
            self._conns[origin] = alive
        return len(alive)

    async def _wait(self, origin: Origin, deadline_ns: int | None) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiters.setdefault(origin, deque())
        queue.append(waiter)
        timeout = None if deadline_ns is None else max(0.0, (deadline_ns - monotonic_ns()) / 1e9)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise timeout_error(
                Phase.POOL, f"no free connection to {origin} before the total timeout ({self._max} per origin)"
            ) from None
        finally:
            if waiter in queue:
                queue.remove(waiter)

    def _released(self, conn: Connection) -> None:
        """Called by a connection when it can take another request, or closed."""
        conns = self._conns.get(conn.origin)
        if conns is not None and conn in conns:
            conns.remove(conn)
            if conn.is_open:
                if not conn.multiplexed and conn.available and self._count(conn.origin) >= self._max:
                    # over the cap (``new_connection`` requests may exceed it): an idle extra is closed, not kept
                    conn.close()
                    return
                conns.append(conn)  # at the end: most recently used
        self._wake(conn.origin)

    def _wake(self, origin: Origin, *, everyone: bool = False) -> None:
        queue = self._waiters.get(origin)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                if not everyone:
                    return

    async def aclose(self) -> None:
        """Close every connection."""
        for conns in self._conns.values():
            for conn in list(conns):
                conn.close()
        self._conns.clear()
        for origin in list(self._waiters):
            self._wake(origin, everyone=True)
        await asyncio.sleep(0)  # let the transports run their close callbacks
