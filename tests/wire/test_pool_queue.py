"""The pool's bookkeeping on its own, with stand-in connections: the cap, the queue of waiting requests, HTTP/2
sharing, and the cost of a hand-out not growing with the number of connections."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from time import monotonic_ns

import pytest

from latscope.timeline.model import ConnectionInfo, Phase, Timeline
from latscope.wire.connection import Connection
from latscope.wire.errors import WireError
from latscope.wire.models import Origin
from latscope.wire.pool import ConnectionPool

HTTP = Origin("http", "127.0.0.1", 8000)
HTTPS = Origin("https", "127.0.0.1", 8443)
_ids = itertools.count(1)


class FakeConnection:
    """Enough of a connection for the pool: a slot count, an open flag, a release callback. ``looked_at`` counts
    how often the pool asked whether it can take a request."""

    def __init__(self, origin: Origin, *, multiplexed: bool = False, streams: int = 1) -> None:
        self.origin = origin
        self.info = ConnectionInfo(connection_id=next(_ids), reused=False)
        self.protocol: object = None
        self.requests = 0
        self.multiplexed = multiplexed
        self.streams = streams
        self.in_use = 0
        self.closed = False
        self.looked_at = 0
        self.on_release: Callable[[FakeConnection], None] | None = None

    @property
    def available(self) -> bool:
        self.looked_at += 1
        return not self.closed and self.in_use < self.streams

    @property
    def usable(self) -> bool:
        return not self.closed

    @property
    def is_open(self) -> bool:
        return not self.closed

    def reserve(self) -> None:
        self.in_use += 1
        self.requests += 1

    def release(self) -> None:
        """The request on it ended: the slot is free again."""
        self.in_use -= 1
        if self.on_release is not None:
            self.on_release(self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.on_release is not None:
                self.on_release(self)


class Opener:
    """Opens FakeConnections, instantly or when a test lets it (``gate``)."""

    def __init__(self, *, multiplexed: bool = False, streams: int = 1) -> None:
        self.multiplexed = multiplexed
        self.streams = streams
        self.opened: list[FakeConnection] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, origin: Origin, t: Timeline, deadline_ns: int | None) -> Connection:
        if self.gate is not None:
            await self.gate.wait()
        conn = FakeConnection(origin, multiplexed=self.multiplexed, streams=self.streams)
        self.opened.append(conn)
        return conn  # type: ignore[return-value]


def fake(conn: Connection) -> FakeConnection:
    assert isinstance(conn, FakeConnection)
    return conn


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_most_recently_released_connection_goes_out_first() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=10, may_multiplex=False)
    a, b = fake(await pool.acquire(HTTP, Timeline())), fake(await pool.acquire(HTTP, Timeline()))
    a.release()
    b.release()
    t = Timeline()
    again = fake(await pool.acquire(HTTP, t))
    assert again is b
    assert t.connection is not None and t.connection.reused and t.connection.requests_before == 1
    assert t.connection.connection_id == b.info.connection_id
    assert b.info.reused is False  # the connection's own record is copied, not changed


async def test_requests_waiting_at_the_cap_are_served_in_arrival_order() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    order: list[int] = []

    async def request(n: int) -> None:
        conn = fake(await pool.acquire(HTTP, Timeline()))
        order.append(n)
        await asyncio.sleep(0)
        conn.release()

    waiting = [asyncio.create_task(request(n)) for n in range(5)]
    await settle()
    assert order == []
    held.release()
    await asyncio.gather(*waiting)
    assert order == [0, 1, 2, 3, 4]
    assert pool.open_connections(HTTP) == 1


async def test_a_new_request_does_not_overtake_a_woken_one() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    first = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    late = asyncio.create_task(pool.acquire(HTTP, Timeline()))  # will run before `first` resumes ...
    held.release()  # ... which this wakes
    got = fake(await asyncio.wait_for(first, 1))
    assert got is held
    await settle()
    assert not late.done()  # queued behind it, not handed the connection `first` was woken for
    got.release()
    assert fake(await late) is held


async def test_a_cancelled_waiter_does_not_hold_up_the_queue() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    gone = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    after = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    gone.cancel()
    await settle()
    held.release()
    assert fake(await asyncio.wait_for(after, 1)) is held


async def test_a_waiter_cancelled_after_being_woken_passes_the_wake_on() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    woken = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    after = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    held.release()  # wakes `woken` ...
    woken.cancel()  # ... which is cancelled before it runs
    assert fake(await asyncio.wait_for(after, 1)) is held
    with pytest.raises(asyncio.CancelledError):
        await woken


async def test_a_closed_connection_frees_its_slot_for_a_waiter() -> None:
    opener = Opener()
    pool = ConnectionPool(opener, max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    waiter = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    held.close()
    fresh = fake(await asyncio.wait_for(waiter, 1))
    assert fresh is not held and len(opener.opened) == 2
    assert pool.open_connections(HTTP) == 1


async def test_the_total_deadline_ends_a_pool_wait_with_a_pool_timeout() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    await pool.acquire(HTTP, Timeline())
    start = monotonic_ns()
    with pytest.raises(WireError) as raised:
        await pool.acquire(HTTP, Timeline(), deadline_ns=start + 50_000_000)
    waited_ms = (monotonic_ns() - start) / 1e6
    assert (raised.value.phase, raised.value.kind) == (Phase.POOL, "timeout")
    assert 45 <= waited_ms < 500
    # the timed-out request left the queue: the next one is served as soon as a connection is free
    nxt = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    assert not nxt.done()


async def test_new_connection_requests_exceed_the_cap_and_idle_extras_are_closed() -> None:
    opener = Opener()
    pool = ConnectionPool(opener, max_per_origin=1, may_multiplex=False)
    a = fake(await pool.acquire(HTTP, Timeline()))
    b = fake(await pool.acquire(HTTP, Timeline(), new_connection=True))
    assert pool.open_connections(HTTP) == 2
    b.release()  # idle and over the cap: closed
    assert b.closed and pool.open_connections(HTTP) == 1
    a.release()
    assert not a.closed


async def test_an_http2_connection_is_shared_up_to_its_stream_limit_then_requests_wait() -> None:
    opener = Opener(multiplexed=True, streams=2)
    pool = ConnectionPool(opener, max_per_origin=1, may_multiplex=True)
    a = fake(await pool.acquire(HTTPS, Timeline()))
    t = Timeline()
    b = fake(await pool.acquire(HTTPS, t))
    assert a is b and t.connection is not None and t.connection.reused
    third = asyncio.create_task(pool.acquire(HTTPS, Timeline()))
    await settle()
    assert not third.done()  # full, and the cap allows no second connection
    a.release()
    assert fake(await asyncio.wait_for(third, 1)) is a
    assert len(opener.opened) == 1


async def test_requests_wait_for_the_first_https_connection_and_share_it_when_it_speaks_h2() -> None:
    opener = Opener(multiplexed=True, streams=100)
    opener.gate = asyncio.Event()
    pool = ConnectionPool(opener, max_per_origin=10, may_multiplex=True)
    tasks = [asyncio.create_task(pool.acquire(HTTPS, Timeline())) for _ in range(20)]
    await settle()
    opener.gate.set()
    conns = {id(c) for c in await asyncio.gather(*tasks)}
    assert len(conns) == 1 and len(opener.opened) == 1


async def test_a_failed_open_lets_the_next_waiter_try() -> None:
    class FailingOnce(Opener):
        failed = False

        async def __call__(self, origin: Origin, t: Timeline, deadline_ns: int | None) -> Connection:
            if not self.failed:
                self.failed = True
                await asyncio.sleep(0.01)
                raise WireError("refused", phase=Phase.CONNECT, kind="refused")
            return await super().__call__(origin, t, deadline_ns)

    pool = ConnectionPool(FailingOnce(), max_per_origin=1, may_multiplex=False)
    first = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    second = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    with pytest.raises(WireError):
        await first
    assert fake(await asyncio.wait_for(second, 1)) is not None
    assert pool.stats[HTTP].connect_failures == 1


async def test_closing_the_pool_fails_waiting_requests() -> None:
    pool = ConnectionPool(Opener(), max_per_origin=1, may_multiplex=False)
    held = fake(await pool.acquire(HTTP, Timeline()))
    waiter = asyncio.create_task(pool.acquire(HTTP, Timeline()))
    await settle()
    await pool.aclose()
    with pytest.raises(WireError) as raised:
        await waiter
    assert raised.value.kind == "closed"
    assert held.closed


async def test_a_hand_out_looks_at_a_bounded_number_of_connections_whatever_their_number() -> None:
    opener = Opener()
    pool = ConnectionPool(opener, max_per_origin=20_000, may_multiplex=False)
    busy = [fake(await pool.acquire(HTTP, Timeline())) for _ in range(10_000)]
    idle = busy.pop()
    idle.release()
    for conn in opener.opened:
        conn.looked_at = 0
    for _ in range(100):  # take and give back the one idle connection among 10,000 busy ones
        conn = fake(await pool.acquire(HTTP, Timeline()))
        assert conn is idle
        conn.release()
    assert sum(c.looked_at for c in opener.opened) <= 2 * 100 + 10
    assert pool.open_connections(HTTP) == 10_000
    assert pool.stats[HTTP].requests == 10_100 and pool.stats[HTTP].reuses == 100
