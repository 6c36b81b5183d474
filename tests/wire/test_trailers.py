"""Trailers: what a server sends after the body (HTTP/2 trailers, the trailer section of a chunked HTTP/1.1 body;
RFC 9110 §6.5) lands in ``Timeline.response_trailers``, where a Server-Timing known only at the end is read."""

from __future__ import annotations

import orjson

from latscope.signals.join import join_server_signals
from latscope.timeline import EventKind, Phase, Timeline
from latscope.timeline.serialize import dumps, loads, timeline_to_dict
from latscope.wire import Client
from tests.support.stream_server import SSE_HEADERS, Received, Reply, StreamServer, chat_chunk
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec
from tests.wire.rawserver import DONE, RawServer, chunked, event, serve_each_request

SERVER_TIMING = "queue;dur=3.5, prefill;dur=12.5"


async def http11_with_trailer(trailer: bytes) -> Timeline:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    head += b"trailer: server-timing\r\n\r\n"
    response = head + chunked(event("a"), DONE) + b"0\r\n" + trailer + b"\r\n"
    async with RawServer(serve_each_request(response)) as server, Client() as client:
        return await client.request(chat_spec(), server.base_url)


async def test_a_chunked_http11_trailer_is_recorded() -> None:
    t = await http11_with_trailer(b"Server-Timing: " + SERVER_TIMING.encode() + b"\r\nX-Tokens: 1\r\n")
    assert t.ok, t.error
    assert t.response_trailers == {"server-timing": SERVER_TIMING, "x-tokens": "1"}
    assert "x-tokens" not in t.response_headers
    assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.DONE]


async def test_a_server_timing_trailer_joins_as_server_phases() -> None:
    t = await http11_with_trailer(b"Server-Timing: " + SERVER_TIMING.encode() + b"\r\n")
    join_server_signals(t)
    assert t.server_ms("prefill") == 12.5 and t.server_ms("queue") == 3.5
    assert {m.source for m in t.server} == {"trailer:server-timing:queue", "trailer:server-timing:prefill"}


async def test_a_response_without_trailers_has_none() -> None:
    t = await http11_with_trailer(b"")
    assert t.ok and t.response_trailers == {}


async def test_an_oversized_trailer_section_fails_the_stream_after_its_events() -> None:
    t = await http11_with_trailer(b"X-Big: " + b"a" * 300_000 + b"\r\n")
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "protocol")
    assert "trailer section is larger than" in t.error.message
    assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.DONE]


async def test_http2_trailers_are_recorded_and_joined(pki: LocalPKI) -> None:
    async def with_trailers(request: Received, reply: Reply) -> None:
        stream_id: int = vars(reply)["stream_id"]
        session = vars(reply)["session"]
        await reply.start(200, SSE_HEADERS)
        await reply.send(b"data: " + orjson.dumps(chat_chunk("a")) + b"\n\n" + DONE)
        session.conn.send_headers(stream_id, [("server-timing", SERVER_TIMING)], end_stream=True)
        await session.flush()

    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with StreamServer(with_trailers, ssl_context=ctx) as server, Client(ca_file=pki.ca_file) as client:
        t = await client.request(chat_spec(), server.base_url)
    assert t.ok, t.error
    assert t.connection is not None and t.connection.http_version == "HTTP/2"
    assert t.response_trailers == {"server-timing": SERVER_TIMING}
    join_server_signals(t)
    assert t.server_ms("prefill") == 12.5


def test_trailers_survive_serialisation_and_are_redacted_like_headers() -> None:
    t = Timeline(url="http://h/v1/chat/completions")
    t.response_trailers = {"server-timing": SERVER_TIMING, "x-api-key": "sk-secret"}
    data = timeline_to_dict(t)
    assert data["response_trailers"] == {"server-timing": SERVER_TIMING, "x-api-key": "[redacted]"}
    assert b"sk-secret" not in dumps(t)
    assert loads(dumps(t)).response_trailers == {"server-timing": SERVER_TIMING, "x-api-key": "[redacted]"}


def test_a_record_written_before_trailers_existed_reads_as_having_none() -> None:
    data = timeline_to_dict(Timeline(url="http://h/"))
    del data["response_trailers"]
    assert loads(orjson.dumps(data)).response_trailers == {}
