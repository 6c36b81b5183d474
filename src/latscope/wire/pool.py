"""The connection pool: connections per origin, reuse accounting, a cap per origin and a wait when it is reached.

Reuse is the point of a pool and also a thing latscope measures (``no-connection-reuse``), so every hand-out is
accounted for: the timeline's :class:`~latscope.timeline.model.ConnectionInfo` says whether the connection was new or
reused and how many requests it carried before, and :class:`~latscope.wire.models.OriginStats` sums it up per origin.

Every operation is O(1) amortised per request, whatever the number of connections: a load generator holds thousands
of them, and a scan of them per request would cost more CPU than the request itself and stall the event loop for
seconds while they open (the loop's stalls are then measured as the server's latency). Per origin the pool keeps
the set of open connections (what the cap counts), the *spare* connections — those that may take another request,
most recently released last — and a FIFO queue of waiting requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Timeline
from latscope.wire.connection import Connection
from latscope.wire.errors import WireError, make_error, timeout_error
from latscope.wire.models import Origin, OriginStats
from latscope.wire.phase import seconds_left

#: ``opener(origin, timeline, deadline_ns)`` opens one connection, timing its phases into the timeline.
Opener = Callable[[Origin, Timeline, "int | None"], Awaitable[Connection]]

#: a waiter's queue is rebuilt when it holds this many more entries than live waiters (cancelled or timed-out waits
#: are left in place and skipped when reached, which keeps leaving the queue O(1)).
_QUEUE_SLACK = 64


class _OriginPool:
    """One origin's connections and waiting requests.

    ``conns`` — open connections, what ``max_per_origin`` counts (with ``opening``); ``spare`` — connections that may
    take another request (idle HTTP/1.1 ones, HTTP/2 ones with free streams), in release order, used as a stack so the
    warmest connection goes out first; a connection that turns out full or closed when popped is dropped from it and
    comes back when it releases a request slot. ``waiters`` — the FIFO queue of waiting requests; ``waiting`` counts
    the live ones in it, ``woken`` those woken that have not run yet (a new request queues behind both, so a woken
    request is never overtaken by one that arrived after it).
    """

    __slots__ = ("conns", "multiplexed", "opening", "spare", "stats", "waiters", "waiting", "woken")

    def __init__(self, stats: OriginStats) -> None:
        self.conns: set[Connection] = set()
        self.spare: dict[Connection, None] = {}  # an insertion-ordered set: popitem() takes the most recent
        self.opening = 0
        self.multiplexed: bool | None = None  #: what the origin's connections speak; None until one opened
        self.waiters: deque[asyncio.Future[bool]] = deque()  # result True: woken; False: the deadline passed
        self.waiting = 0
        self.woken = 0
        self.stats = stats


#: Connections a client opens to one origin at most, unless told otherwise: more than any load on one host needs.
DEFAULT_MAX_CONNECTIONS_PER_ORIGIN = 256
#: Browsers open at most this many HTTP/1.1 connections per host (Chrome, Firefox): a page's further requests wait
#: for one of them; over HTTP/2 one connection carries them all.
BROWSER_CONNECTIONS_PER_HOST = 6


class ConnectionPool:
    """Connections per origin, at most ``max_per_origin`` open at once (``new_connection`` requests may exceed it).

    HTTP/1.1 connections carry one request at a time and go back to the pool when the response ended on a reusable
    connection (most recently used first). HTTP/2 connections are shared while they have stream capacity. While an
    https origin's protocol is still unknown and a connection to it is being opened, other requests wait for it
    rather than open their own: if it speaks h2, they all share it, as a browser would. Requests that find the cap
    reached wait in arrival order.
    """

    def __init__(self, opener: Opener, *, max_per_origin: int, may_multiplex: bool) -> None:
        self._opener = opener
        self._max = max_per_origin
        self._may_multiplex = may_multiplex
        self._origins: dict[Origin, _OriginPool] = {}
        self._closed = False
        self.stats: dict[Origin, OriginStats] = {}

    async def acquire(
        self, origin: Origin, t: Timeline, *, new_connection: bool = False, deadline_ns: int | None = None
    ) -> Connection:
        """A connection for one request to ``origin``, its slot reserved; ``t.connection`` is filled in. Waiting for
        a connection, and opening one, end at ``deadline_ns`` (monotonic ns) with a timeout error."""
        p = self._origins.get(origin)
        if p is None:
            p = self._origins[origin] = _OriginPool(self.stats.setdefault(origin, OriginStats()))
        if self._closed:
            raise _closed_error()
        if new_connection:
            return await self._open(origin, p, t, deadline_ns)
        if not (p.waiting or p.woken):  # nobody is ahead of this request
            conn = self._take(p)
            if conn is not None:
                return self._hand_out(conn, p, t, reused=True)
            if self._may_open(origin, p):
                return await self._open(origin, p, t, deadline_ns)
        front = False
        while True:
            await self._wait(origin, p, deadline_ns, front=front)
            if self._closed:
                raise _closed_error()
            conn = self._take(p)
            if conn is not None:
                conn = self._hand_out(conn, p, t, reused=True)
                self._pass_on(origin, p)
                return conn
            if self._may_open(origin, p):
                return await self._open(origin, p, t, deadline_ns, pass_on=True)
            front = True  # woken for nothing (another waiter took it): keep this request's place in the queue

    def find(self, connection_id: int) -> Connection | None:
        """The open connection with this id (``ConnectionInfo.connection_id``), or None once it closed."""
        for p in self._origins.values():
            for conn in p.conns:
                if conn.info.connection_id == connection_id:
                    return conn
        return None

    def open_connections(self, origin: Origin) -> int:
        """How many connections to ``origin`` are open (what ``max_per_origin`` limits)."""
        p = self._origins.get(origin)
        return 0 if p is None else len(p.conns)

    async def aclose(self) -> None:
        """Close every connection; waiting requests fail with kind "closed"."""
        self._closed = True
        for p in self._origins.values():
            for conn in list(p.conns):
                conn.close()
            p.conns.clear()
            p.spare.clear()
            self._wake(p, every=True)
        await asyncio.sleep(0)  # let the transports run their close callbacks

    # --- internals ----------------------------------------------------------------------------------------------

    def _take(self, p: _OriginPool) -> Connection | None:
        """The most recently released spare connection that can take a request now, or None."""
        spare = p.spare
        while spare:
            # popitem, not del of the last key: it also trims the deleted slots at the dict's end, so this stays O(1)
            conn, _ = spare.popitem()
            if conn.available:
                return conn  # an HTTP/2 connection with streams left is put back by _hand_out
        return None

    def _may_open(self, origin: Origin, p: _OriginPool) -> bool:
        if p.opening and p.multiplexed is None and self._may_multiplex and origin.tls:
            return False  # the first connection may speak h2: wait for it rather than open a second one
        return len(p.conns) + p.opening < self._max

    def _hand_out(self, conn: Connection, p: _OriginPool, t: Timeline, *, reused: bool) -> Connection:
        before = conn.requests
        conn.reserve()
        if conn.multiplexed and conn.available:
            p.spare[conn] = None  # streams left: others may share it
        t.connection = _copy_info(conn.info, reused, before)
        stats = p.stats
        stats.requests += 1
        if before > 0:
            stats.reuses += 1
        return conn

    async def _open(
        self, origin: Origin, p: _OriginPool, t: Timeline, deadline_ns: int | None, *, pass_on: bool = False
    ) -> Connection:
        stats = p.stats
        p.opening += 1
        if pass_on:
            self._pass_on(origin, p)  # the slot is claimed: the next waiter may find room for another
        try:
            conn = await self._opener(origin, t, deadline_ns)
        except BaseException as exc:
            p.opening -= 1
            if isinstance(exc, WireError):
                stats.connect_failures += 1
            self._wake(p)  # the slot it held is free again
            raise
        p.opening -= 1
        stats.connections_opened += 1
        if conn.info.tls_session_offered:
            stats.tls_sessions_offered += 1
            if conn.info.tls_session_resumed:
                stats.tls_sessions_resumed += 1
        learned = p.multiplexed is None
        p.multiplexed = conn.multiplexed
        if self._closed:
            conn.close()
            raise _closed_error()
        p.conns.add(conn)
        conn_any: Any = conn
        conn_any.on_release = self._released
        conn = self._hand_out(conn, p, t, reused=False)
        if learned:
            self._wake(p, every=True)  # requests waiting to learn the protocol can look again
        else:
            self._pass_on(origin, p)
        return conn

    def _released(self, conn: Connection) -> None:
        """Called by a connection when it can take another request, or closed."""
        p = self._origins.get(conn.origin)
        if p is None or conn not in p.conns:
            return
        if not conn.is_open:
            p.conns.discard(conn)
            p.spare.pop(conn, None)
        elif conn.available:
            if not conn.multiplexed and len(p.conns) > self._max:
                # over the cap (``new_connection`` requests may exceed it): an idle extra is closed, not kept
                conn.close()  # comes back here as closed
                return
            p.spare.pop(conn, None)
            p.spare[conn] = None  # at the end: most recently used
        else:
            p.spare.pop(conn, None)  # open but refusing new requests (HTTP/2 GOAWAY): its close frees the slot
            return
        self._wake(p)

    async def _wait(self, origin: Origin, p: _OriginPool, deadline_ns: int | None, *, front: bool) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        waiters = p.waiters
        if len(waiters) > 2 * p.waiting + _QUEUE_SLACK:
            waiters = p.waiters = deque(w for w in waiters if not w.done())
        if front:
            waiters.appendleft(waiter)
        else:
            waiters.append(waiter)
        p.waiting += 1
        timer = None
        if deadline_ns is not None:
            timer = loop.call_later(seconds_left(deadline_ns), _expire, waiter, p)
        try:
            woken = await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                p.waiting -= 1  # cancelled while queued: the entry stays, skipped when reached
            elif waiter.result():
                p.woken -= 1
                self._wake(p)  # woken, then cancelled before it could run: the wake goes to the next one
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if not woken:
            raise timeout_error(
                Phase.POOL, f"no free connection to {origin} before the total timeout ({self._max} per origin)"
            )
        p.woken -= 1

    def _wake(self, p: _OriginPool, *, every: bool = False) -> None:
        """Wake the first live waiter (``every``: all of them)."""
        waiters = p.waiters
        while p.waiting and waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                p.waiting -= 1
                p.woken += 1
                if not every:
                    return

    def _pass_on(self, origin: Origin, p: _OriginPool) -> None:
        """A waiter got what it was woken for: wake the next one if there may be something left for it too."""
        if p.waiting and (p.spare or self._may_open(origin, p)):
            self._wake(p)


def _expire(waiter: asyncio.Future[bool], p: _OriginPool) -> None:
    if not waiter.done():
        waiter.set_result(False)
        p.waiting -= 1


def _closed_error() -> WireError:
    return make_error("the client is closed", phase=Phase.POOL, kind=ErrorKind.CLOSED)


def _copy_info(info: ConnectionInfo, reused: bool, requests_before: int) -> ConnectionInfo:
    """``info`` for one request: a copy with ``reused`` and ``requests_before`` set. Built from one attrgetter call,
    a fifth of what ``dataclasses.replace`` costs (it walks ``fields()`` and builds keyword arguments each time)."""
    new = ConnectionInfo(*_info_values(info))
    new.reused = reused
    new.requests_before = requests_before
    return new


#: every field of ConnectionInfo in declaration order, i.e. the order of its constructor's parameters
_info_values = operator.attrgetter(*(f.name for f in dataclasses.fields(ConnectionInfo)))
