"""HTTP/1.1 receive-path edge cases against raw socket servers: how a response ends, and whether the connection may
carry the next request (RFC 9112 §6.3 for the body length, §9.3 / §9.6 for persistence and closing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pytest

from latscope.dialects.base import RequestSpec
from latscope.timeline import EventKind, Phase, Timeline
from latscope.wire import Client, Timeouts
from tests.wire.conftest import chat_spec
from tests.wire.rawserver import DONE, RawConnection, RawServer, Script, chunked, event, serve_each_request

SSE = b"content-type: text/event-stream\r\n"
STREAM = event("a") + event("b") + DONE
#: short limits: a case the client gets wrong fails quickly instead of waiting minutes
TIMEOUTS = Timeouts(connect_s=5.0, headers_s=5.0, read_s=5.0, total_s=10.0)


def sized(body: bytes, *, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    """A Content-Length response carrying ``body`` as an event stream."""
    return b"HTTP/1.1 " + status + b"\r\n" + SSE + extra + b"content-length: %d\r\n\r\n" % len(body) + body


class Pair(NamedTuple):
    first: Timeline
    second: Timeline
    connections: int  #: connections the server accepted for the two


async def twice(script: Script, spec: RequestSpec | None = None, headers: Sequence[tuple[str, str]] = ()) -> Pair:
    """Two requests one after the other on one client."""
    async with RawServer(script) as server, Client(timeouts=TIMEOUTS) as client:
        first = await client.request(spec or chat_spec(), server.base_url, headers=headers)
        second = await client.request(spec or chat_spec(), server.base_url, headers=headers)
        connections = server.connections
    assert first.connection is not None and second.connection is not None
    assert second.connection.reused is (connections == 1)
    return Pair(first, second, connections)


def kinds(t: Timeline) -> list[EventKind]:
    return [e.kind for e in t.events]


# -- persistence ---------------------------------------------------------------------------------------------------


async def test_a_keep_alive_response_leaves_the_connection_for_the_next_request() -> None:
    first, second, connections = await twice(serve_each_request(sized(STREAM)))
    assert first.ok and second.ok, (first.error, second.error)
    assert connections == 1
    assert kinds(second) == [EventKind.CONTENT, EventKind.CONTENT, EventKind.DONE]


async def test_the_servers_connection_close_ends_the_connection_with_the_response() -> None:
    first, _, connections = await twice(
        serve_each_request(sized(STREAM, extra=b"connection: close\r\n"), then_close=True)
    )
    assert first.ok and connections == 2
    assert first.response_headers["connection"] == "close"


async def test_the_callers_connection_close_ends_the_connection_with_the_response() -> None:
    first, second, connections = await twice(serve_each_request(sized(STREAM)), headers=[("Connection", "close")])
    assert first.ok and second.ok and connections == 2
    assert first.request_headers["connection"] == "close"


async def test_an_http10_response_delimited_by_the_close_is_complete() -> None:
    response = b"HTTP/1.0 200 OK\r\n" + SSE + b"\r\n" + STREAM
    first, _, connections = await twice(serve_each_request(response, then_close=True))
    assert first.ok, first.error
    assert first.connection is not None and first.connection.http_version == "HTTP/1.0"
    assert kinds(first) == [EventKind.CONTENT, EventKind.CONTENT, EventKind.DONE]
    assert first.response_body_bytes == len(STREAM) and connections == 2


async def test_an_http10_response_that_asks_for_keep_alive_is_reused() -> None:
    response = b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\n" + SSE + b"content-length: %d\r\n\r\n" % len(STREAM)
    first, second, connections = await twice(serve_each_request(response + STREAM))
    assert first.ok and second.ok and connections == 1


async def test_an_http11_body_without_length_or_chunks_ends_at_the_close() -> None:
    response = b"HTTP/1.1 200 OK\r\n" + SSE + b"\r\n" + STREAM
    first, _, connections = await twice(serve_each_request(response, then_close=True))
    assert first.ok, first.error
    assert kinds(first)[-1] is EventKind.DONE and connections == 2


async def test_bytes_after_the_response_keep_it_but_retire_the_connection() -> None:
    first, second, connections = await twice(serve_each_request(sized(STREAM) + b"JUNK"))
    assert first.ok and second.ok, (first.error, second.error)
    assert kinds(first)[-1] is EventKind.DONE
    assert connections == 2  # unasked-for bytes: the connection is not at a clean message boundary


# -- how a response ends -------------------------------------------------------------------------------------------


async def test_interim_responses_are_skipped_and_the_final_head_is_recorded() -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </style.css>\r\n\r\n"
    final = b"HTTP/1.1 200 OK\r\n" + SSE + b"transfer-encoding: chunked\r\n\r\n" + chunked(event("a"), DONE)
    final += b"0\r\n\r\n"
    first, second, connections = await twice(serve_each_request(interim + final))
    assert first.ok, first.error
    assert first.status == 200 and "link" not in first.response_headers
    assert kinds(first) == [EventKind.CONTENT, EventKind.DONE]
    assert second.ok and connections == 1


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 204 No Content\r\n\r\n",
        # 304 has no body whatever its Content-Length says (RFC 9110 §15.4.5, RFC 9112 §6.3 rule 1)
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 100\r\n\r\n",
    ],
    ids=["204", "304"],
)
async def test_a_status_without_a_body_ends_at_its_head(response: bytes) -> None:
    async with RawServer(serve_each_request(response)) as server, Client(timeouts=TIMEOUTS) as client:
        first = await client.get(f"{server.base_url}/models")
        second = await client.get(f"{server.base_url}/models")
        connections = server.connections
    assert first.body == b"" and first.timeline.ok, first.timeline.error
    assert second.timeline.connection is not None and second.timeline.connection.reused
    assert connections == 1


async def test_a_head_response_has_no_body_whatever_its_content_length() -> None:
    head = RequestSpec(method="HEAD", path="/models", body=b"")
    first, second, connections = await twice(serve_each_request(sized(STREAM)[: -len(STREAM)]), head)
    assert first.ok and second.ok, (first.error, second.error)
    assert first.response_body_bytes == 0 and connections == 1


async def test_a_body_split_into_single_bytes_decodes_like_one_read() -> None:
    response = b"HTTP/1.1 200 OK\r\n" + SSE + b"transfer-encoding: chunked\r\n\r\n"
    response += chunked(event("a"), event("b"), DONE) + b"0\r\n\r\n"

    async def bytewise(conn: RawConnection) -> None:
        if await conn.read_request() is not None:
            await conn.send_bytewise(response)
            await conn.wait_for_client_close()

    async with RawServer(bytewise) as server, Client(timeouts=TIMEOUTS) as client:
        t = await client.request(chat_spec(), server.base_url)
    assert t.ok, t.error
    assert kinds(t) == [EventKind.CONTENT, EventKind.CONTENT, EventKind.DONE]
    assert len(t.reads) > 50  # the server's one-byte writes arrived as many reads
    # each event is stamped with the read that completed it, a later read than the event before
    assert all(t.reads[e.read_index].at_ns == e.at_ns for e in t.events)
    assert t.events[0].read_index < t.events[1].read_index < t.events[2].read_index


async def test_chunked_framing_wins_over_a_content_length_sent_with_it() -> None:
    response = b"HTTP/1.1 200 OK\r\n" + SSE + b"content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
    first, _, _ = await twice(serve_each_request(response + chunked(event("a"), DONE) + b"0\r\n\r\n"))
    assert first.ok, first.error
    assert kinds(first) == [EventKind.CONTENT, EventKind.DONE]


# -- truncated and malformed responses -----------------------------------------------------------------------------


async def one(response: bytes, *, close: bool = True) -> Timeline:
    """One streamed request answered with ``response``; the server then closes (or waits for the client to)."""

    async def script(conn: RawConnection) -> None:
        if await conn.read_request() is not None:
            await conn.send(response)
            if close:
                conn.close()
            else:
                await conn.wait_for_client_close()

    async with RawServer(script) as server, Client(timeouts=TIMEOUTS) as client:
        return await client.request(chat_spec(), server.base_url)


async def test_a_content_length_body_cut_short_is_truncated_and_keeps_its_events() -> None:
    t = await one(b"HTTP/1.1 200 OK\r\n" + SSE + b"content-length: 1000\r\n\r\n" + event("a"))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "truncated")
    assert "1000-byte Content-Length body cut short" in t.error.message
    assert kinds(t) == [EventKind.CONTENT]


async def test_a_chunked_body_cut_short_is_truncated_and_keeps_its_events() -> None:
    t = await one(b"HTTP/1.1 200 OK\r\n" + SSE + b"transfer-encoding: chunked\r\n\r\n" + chunked(event("a")))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "truncated")
    assert "terminating zero-size chunk" in t.error.message
    assert kinds(t) == [EventKind.CONTENT]


async def test_a_malformed_chunk_is_a_protocol_error_after_the_events_before_it() -> None:
    head = b"HTTP/1.1 200 OK\r\n" + SSE + b"transfer-encoding: chunked\r\n\r\n"
    t = await one(head + chunked(event("a")) + b"zz\r\nxx\r\n", close=False)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "protocol")
    assert kinds(t) == [EventKind.CONTENT]


@pytest.mark.parametrize(
    ("response", "kind", "message"),
    [
        (b"", "closed", "before sending a complete response head"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", "closed", "before sending a complete response head"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "protocol", "invalid HTTP/1.1 response"),
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n", "protocol", "without an upgrade"),
        (b"HTTP/1.1 099 Odd\r\ncontent-length: 0\r\n\r\n", "protocol", "status code 99 is not a valid HTTP status"),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 300_000 + b"\r\n\r\n", "protocol", "head is larger than"),
    ],
    ids=["nothing", "half-a-head", "not-http", "101", "status-099", "huge-head"],
)
async def test_no_usable_response_head_fails_in_the_headers_phase(response: bytes, kind: str, message: str) -> None:
    t = await one(response, close=kind == "closed")
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.HEADERS, kind)
    assert message in t.error.message
    assert t.status is None


async def test_an_error_status_with_a_chunked_body_carries_the_api_message() -> None:
    body = b'{"error":{"message":"boom"}}'
    head = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    t = await one(head + chunked(body) + b"0\r\n\r\n", close=False)
    assert t.error is not None
    assert (t.error.kind, t.error.status, t.error.message) == ("http-status", 500, "HTTP 500: boom")
    assert t.response_body_bytes == len(body)
