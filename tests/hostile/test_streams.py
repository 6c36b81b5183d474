"""The client against a hostile server (tests/support/hostile.py): every misbehaviour ends in a named error — kind,
phase, a message that says what happened — with what was measured before it kept; nothing is counted a success that
delivered no token; nothing makes the client hold a stream without bound."""

from __future__ import annotations

import asyncio

import pytest

from latscope.dialects.openai import chat_request
from latscope.timeline.model import ErrorKind, EventKind, Phase, Timeline
from latscope.wire import Client, Limits, Timeouts
from tests.support.hostile import TOKENS, HostileServer

pytestmark = pytest.mark.timeout(60)


async def _one(mode: str, **client: object) -> tuple[Timeline, HostileServer]:
    async with HostileServer(mode) as server, Client(**client) as c:  # type: ignore[arg-type]
        t = await c.request(chat_request("hostile-model", "hello", 16), server.base_url)
    return t, server


def _tokens(t: Timeline) -> int:
    return sum(1 for e in t.events if e.kind is EventKind.CONTENT)


async def test_an_empty_200_stream_is_an_error_of_its_own_kind() -> None:
    t, _ = await _one("empty-200")
    assert t.error is not None and t.error.kind is ErrorKind.EMPTY and t.error.phase is Phase.STREAM
    assert t.status == 200 and "without a token" in t.error.message and "empty body" in t.error.message


async def test_a_stream_of_events_without_a_token_is_an_error_too() -> None:
    t, _ = await _one("no-token")
    assert t.error is not None and t.error.kind is ErrorKind.EMPTY
    assert "3 events" in t.error.message and "no token" in t.error.message
    assert len(t.events) == 3  # role, finish, [DONE]: kept


@pytest.mark.parametrize("mode", ["gzip", "br", "zstd"])
async def test_a_compressed_stream_is_decoded_and_named(mode: str) -> None:
    t, server = await _one(mode)
    assert t.error is None and _tokens(t) == TOKENS, t.error
    assert any("compressed the stream" in w and mode in w for w in t.warnings), t.warnings
    post = next(s for s in server.seen if s.method == "POST")
    assert post.headers["accept-encoding"] == "identity"  # it was asked not to


async def test_an_encoding_with_no_decoder_is_a_named_error() -> None:
    t, _ = await _one("unknown-encoding")
    assert t.error is not None and t.error.kind is ErrorKind.ENCODING and t.error.phase is Phase.HEADERS
    assert "'compress'" in t.error.message


async def test_a_body_that_is_not_the_encoding_it_claims_is_a_named_error() -> None:
    t, _ = await _one("bad-gzip")
    assert t.error is not None and t.error.kind is ErrorKind.ENCODING and "'gzip'" in t.error.message


async def test_a_line_that_never_ends_stops_at_the_line_limit() -> None:
    t, _ = await _one("endless-line", limits=Limits(max_line_bytes=1024 * 1024))
    assert t.error is not None and t.error.kind is ErrorKind.LIMIT and t.error.phase is Phase.STREAM
    assert "line limit" in t.error.message and "1048576" in t.error.message
    assert t.reads and t.response_body_bytes > 1024 * 1024  # the partial timeline is kept


async def test_an_event_that_never_ends_stops_at_the_event_limit() -> None:
    t, _ = await _one("endless-event", limits=Limits(max_event_bytes=256 * 1024))
    assert t.error is not None and t.error.kind is ErrorKind.LIMIT and "event limit" in t.error.message


async def test_an_endless_stream_stops_at_the_body_limit_with_its_tokens_kept() -> None:
    t, _ = await _one("endless-stream", limits=Limits(max_body_bytes=64 * 1024))
    assert t.error is not None and t.error.kind is ErrorKind.LIMIT and "body limit" in t.error.message
    assert _tokens(t) > 10 and t.first_token_ns is not None


async def test_an_endless_stream_stops_at_max_time_with_its_tokens_kept() -> None:
    started = asyncio.get_running_loop().time()
    t, _ = await _one("endless-stream", timeouts=Timeouts(total_s=0.5))
    took = asyncio.get_running_loop().time() - started
    assert t.error is not None and t.error.kind is ErrorKind.TIMEOUT and t.error.phase is Phase.STREAM
    assert "total timeout of 0.5 s" in t.error.message and _tokens(t) > 0
    assert took < 30  # bounded: the stream itself never ends


async def test_a_rate_limit_says_how_long_to_wait() -> None:
    t, _ = await _one("rate-limited")
    assert t.error is not None and t.error.status == 429 and "(Retry-After: 7 s)" in t.error.message


async def test_a_kept_alive_connection_closed_under_the_next_request_is_retried_once_on_a_new_one() -> None:
    async with HostileServer("close-after-response") as server, Client() as c:
        spec = chat_request("hostile-model", "hello", 16)
        first = await c.request(spec, server.base_url)
        second = await c.request(spec, server.base_url)
    assert first.error is None and first.stale_retry_error is None
    assert second.error is None and _tokens(second) == TOKENS
    stale = second.stale_retry_error
    assert stale is not None and stale.kind in (ErrorKind.CLOSED, ErrorKind.RESET) and stale.phase is Phase.HEADERS
    assert second.connection is not None and second.connection.reused is False  # the attempt recorded is the retry
    assert [(s.connection, s.on_connection) for s in server.seen if s.method == "POST"] == [(1, 1), (1, 2), (2, 1)]


async def test_a_failure_after_response_bytes_is_not_retried() -> None:
    # the stream broke after it had started: the request may have run; sending it again is not the client's call
    async with HostileServer("endless-stream") as server, Client(timeouts=Timeouts(total_s=0.3)) as c:
        t = await c.request(chat_request("hostile-model", "hello", 16), server.base_url)
    assert t.error is not None and t.stale_retry_error is None
    assert len([s for s in server.seen if s.method == "POST"]) == 1
