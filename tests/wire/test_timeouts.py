"""The request's time limits: each names the phase it ended, none fires while the response keeps coming, and the
total limit is checked where each phase waits (no task of its own per request)."""

from __future__ import annotations

import asyncio
from time import monotonic_ns

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import EventKind, Phase, Timeline
from latscope.wire import Client, Timeouts
from tests.support.stream_server import SSE_HEADERS, Received, Reply, StreamServer, chat_chunk, paced_stream
from tests.wire.conftest import chat_spec


async def _request(handler: object, timeouts: Timeouts) -> Timeline:
    async with StreamServer(handler) as server, Client(timeouts=timeouts) as client:  # type: ignore[arg-type]
        return await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))


async def test_a_stream_longer_than_the_read_gap_limit_completes_while_reads_keep_coming() -> None:
    t = await _request(paced_stream(12, 0.03), Timeouts(read_s=0.15, headers_s=0.15))
    assert t.ok, t.error
    assert t.ended_ns is not None and t.headers_received_ns is not None
    assert (t.ended_ns - t.headers_received_ns) / 1e9 > 0.15  # it did outlast both limits


async def test_a_head_slower_than_the_read_gap_limit_but_within_its_own_is_waited_for() -> None:
    async def slow_head(request: Received, reply: Reply) -> None:
        await asyncio.sleep(0.3)
        await paced_stream(2)(request, reply)

    t = await _request(slow_head, Timeouts(read_s=0.1, headers_s=2.0))
    assert t.ok, t.error


async def test_the_total_timeout_during_the_stream_names_the_stream_phase_and_keeps_the_events() -> None:
    t = await _request(paced_stream(50, 0.02), Timeouts(total_s=0.3))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "timeout")
    assert "total timeout of 0.3 s exceeded during stream" in t.error.message
    assert 0 < [e.kind for e in t.events].count(EventKind.CONTENT) < 50
    assert t.ended_ns is not None and 0.28 <= (t.ended_ns - t.started_ns) / 1e9 < 1.0


async def test_a_read_gap_after_some_events_fails_the_stream_and_ends_the_connection() -> None:
    async def stall(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk("a"))
        await asyncio.sleep(5)

    async with StreamServer(stall) as server, Client(timeouts=Timeouts(read_s=0.1)) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        await asyncio.sleep(0.05)
        opened = client.stats()[f"http://127.0.0.1:{server.port}"].connections_opened
        still_open = client._pool.open_connections(next(iter(client._pool.stats)))
    assert t.error is not None and (t.error.phase, t.error.kind) == (Phase.STREAM, "timeout")
    assert opened == 1 and still_open == 0  # mid-body: the connection cannot carry another request


async def test_the_total_timeout_while_waiting_for_a_pooled_connection_names_the_pool_phase() -> None:
    async with StreamServer(paced_stream(20, 0.05)) as server, Client(max_connections_per_origin=1) as client:
        spec, decoder = chat_spec(), OpenAIStreamDecoder
        first = asyncio.create_task(client.request(spec, server.base_url, decoder=decoder("chat")))
        await asyncio.sleep(0.05)
        client.timeouts = Timeouts(total_s=0.25)  # for the second request only: the first holds the connection ~1 s
        started = monotonic_ns()
        second = await client.request(spec, server.base_url, decoder=decoder("chat"))
        waited_s = (monotonic_ns() - started) / 1e9
        await first
    assert second.error is not None
    assert (second.error.phase, second.error.kind) == (Phase.POOL, "timeout")
    assert 0.15 <= waited_s < 0.6


async def test_a_request_with_a_total_timeout_waits_in_its_own_task_only() -> None:
    async def silent(request: Received, reply: Reply) -> None:
        await asyncio.sleep(1)
        await paced_stream(1)(request, reply)

    async with (
        StreamServer(silent) as server,
        Client(max_connections_per_origin=1, timeouts=Timeouts(total_s=5.0)) as client,
    ):
        first = asyncio.create_task(client.request(chat_spec(), server.base_url))
        await asyncio.sleep(0.1)  # sent, waiting for the head
        before = len(asyncio.all_tasks())
        second = asyncio.create_task(client.request(chat_spec(), server.base_url))
        await asyncio.sleep(0.05)  # waiting for the pool
        during = len(asyncio.all_tasks())
        first.cancel()
        second.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
    assert during == before + 1  # the request's own task; no helper task for the total limit
