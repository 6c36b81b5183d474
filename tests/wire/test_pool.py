"""Connection reuse is recorded per request: keep-alive reuse, Connection: close, the per-origin cap."""

from __future__ import annotations

import asyncio

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import metrics
from latscope.wire import Client, Origin
from tests.support.stream_server import Received, Reply, StreamServer, paced_stream
from tests.wire.conftest import chat_spec


async def test_second_request_reuses_the_keep_alive_connection() -> None:
    async with StreamServer(paced_stream(3)) as server, Client() as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert first.ok and second.ok
    assert first.connection is not None and second.connection is not None
    assert first.connection.reused is False and first.connection.requests_before == 0
    assert second.connection.reused is True and second.connection.requests_before == 1
    assert second.connection.connection_id == first.connection.connection_id
    assert second.connect_start_ns is None  # no connection setup for a reused connection
    assert server.connections == 1
    stats = client.stats()[f"http://127.0.0.1:{server.port}"]
    assert (stats.connections_opened, stats.requests, stats.reuses) == (1, 2, 1)


async def test_connection_close_is_honoured_and_not_reused() -> None:
    async with StreamServer(paced_stream(3), keep_alive=False) as server, Client() as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert first.ok and second.ok
    assert first.connection is not None and second.connection is not None
    assert second.connection.reused is False
    assert second.connection.connection_id != first.connection.connection_id
    assert second.connect_start_ns is not None
    assert server.connections == 2


async def test_new_connection_forces_a_fresh_connection() -> None:
    async with StreamServer(paced_stream(2)) as server, Client() as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(
            chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
        )
    assert first.connection is not None and second.connection is not None
    assert second.connection.reused is False
    assert second.connection.connection_id != first.connection.connection_id
    assert server.connections == 2


async def test_a_full_pool_makes_requests_wait_then_reuse() -> None:
    async with StreamServer(paced_stream(5, 0.005)) as server, Client(max_connections_per_origin=1) as client:
        a, b = await asyncio.gather(
            client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat")),
            client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat")),
        )
    assert a.ok and b.ok
    assert server.connections == 1
    waited = max(metrics.pool_ms(a) or 0.0, metrics.pool_ms(b) or 0.0)
    streamed = min(metrics.e2e_ms(a) or 0.0, metrics.e2e_ms(b) or 0.0)
    assert waited > 0.5 * streamed  # the second request waited about one whole first request


async def test_an_idle_connection_closed_by_the_server_is_not_reused() -> None:
    async def once_then_close(request: Received, reply: Reply) -> None:
        await paced_stream(1)(request, reply)
        await asyncio.sleep(0.01)
        reply.close()  # keep-alive promised, then closed while idle (a short keep-alive timeout)

    async with StreamServer(once_then_close) as server, Client() as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        await asyncio.sleep(0.1)
        second = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert first.ok and second.ok, second.error
    assert second.connection is not None and second.connection.reused is False


async def test_fresh_connections_beyond_the_cap_are_closed_when_idle() -> None:
    async with StreamServer(paced_stream(1)) as server, Client(max_connections_per_origin=2) as client:
        for _ in range(5):
            t = await client.request(chat_spec(), server.base_url, new_connection=True)
            assert t.ok
        await asyncio.sleep(0.05)
        stats = client.stats()[f"http://127.0.0.1:{server.port}"]
        open_now = client._pool.open_connections(Origin("http", "127.0.0.1", server.port))
    assert stats.connections_opened == 5 and server.connections == 5
    assert open_now <= 2
