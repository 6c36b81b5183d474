"""Requests that meet a kept-alive connection the server has closed under them are repeated once on a new one.

Real servers close a connection after some responses without ``Connection: close`` (uvicorn after an unhandled
exception: llama-cpp-python's 500 for a body that is not JSON, its empty stream for an over-long prompt), and the
next request on it races the close: it fails before the response head, or gets a head and then the close. The
servers here do that on purpose, on every second request of a connection.
"""

from __future__ import annotations

from latscope.checks.samples import RequestSample
from latscope.diagnose.context import REQUEST_TIMEOUTS, Context
from latscope.wire.target import Target
from tests.support.stream_server import Handler, Received, Reply, StreamServer, paced_stream


def second_request_dies(how: str) -> Handler:
    """Streams 3 tokens on the first request of each connection; on the second one: ``"close"`` (FIN without an
    answer), ``"reset"`` (RST), ``"head"`` (a 200 head, then FIN) or ``"midstream"`` (two events, then FIN)."""
    answer = paced_stream(3)
    seen: dict[int, int] = {}

    async def handler(request: Received, reply: Reply) -> None:
        n = seen[request.connection_index] = seen.get(request.connection_index, 0) + 1
        if n == 1:
            await answer(request, reply)
        elif how == "reset":
            reply.reset()
        elif how == "close":
            reply.close()
        else:
            await reply.start(200, [("content-type", "text/event-stream")])
            if how == "midstream":
                await reply.send(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n' * 2)
            reply.close()

    return handler


async def _two_requests(server: StreamServer) -> tuple[RequestSample, RequestSample, int]:
    ctx = Context(Target.resolve(server.base_url, timeouts=REQUEST_TIMEOUTS), model="test-model")
    async with ctx.client() as client:
        first = await ctx.send(client, ctx.spec(16, 3), label="first")
        second = await ctx.send(client, ctx.spec(16, 3), label="second")
    return first, second, ctx.requests_sent


async def _check_retried(how: str) -> None:
    async with StreamServer(second_request_dies(how)) as server:
        first, second, sent = await _two_requests(server)
        connections = server.connections
    assert first.ok and first.reused is False
    assert second.ok and second.stale_retry, second
    assert second.reused is False and second.output_tokens == 3  # the retry's own connection and answer
    assert sent == 3 and connections == 2


async def test_a_connection_closed_before_the_response_head_is_retried_on_a_new_one() -> None:
    await _check_retried("close")


async def test_a_connection_reset_before_the_response_head_is_retried_on_a_new_one() -> None:
    await _check_retried("reset")


async def test_a_connection_closed_right_after_the_response_head_is_retried_on_a_new_one() -> None:
    await _check_retried("head")


async def test_a_stream_cut_after_it_delivered_events_is_a_failure_not_a_retry() -> None:
    async with StreamServer(second_request_dies("midstream")) as server:
        _, second, sent = await _two_requests(server)
    assert not second.ok and not second.stale_retry and sent == 2, second


async def test_a_failure_on_a_new_connection_is_not_retried() -> None:
    async def refuse(request: Received, reply: Reply) -> None:
        reply.close()

    async with StreamServer(refuse) as server:
        ctx = Context(Target.resolve(server.base_url, timeouts=REQUEST_TIMEOUTS), model="test-model")
        async with ctx.client() as client:
            sample = await ctx.send(client, ctx.spec(16, 3), label="only")
    assert not sample.ok and not sample.stale_retry and ctx.requests_sent == 1
