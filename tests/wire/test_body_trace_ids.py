"""The trace ids a response body names in its first bytes (``Timeline.body_trace_ids``), for a request that sent a
``traceparent``: on bytes, and through the client for a stream and a whole JSON body."""

from __future__ import annotations

from latscope.dialects import get_dialect
from latscope.timeline import Timeline
from latscope.timeline.serialize import dumps, loads, timeline_to_dict
from latscope.wire import Client
from latscope.wire.exchange import RESPONSE_ID_SCAN_BYTES, body_trace_ids
from tests.support.stream_server import SSE_HEADERS, Handler, Received, Reply, StreamServer, chat_chunk
from tests.wire.conftest import chat_spec

SENT = "4bf92f3577b34da6a3ce929d0e0e4736"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def test_the_sent_trace_id_anywhere_in_the_body_is_found() -> None:
    assert body_trace_ids(b'data: {"id":"chatcmpl-1","request_id":"req-' + SENT.encode() + b'"}', SENT) == [SENT]


def test_the_sent_id_is_found_whatever_its_case() -> None:
    assert body_trace_ids(b'{"traceId":"' + SENT.upper().encode() + b'"}', SENT) == [SENT]


def test_another_traceparent_in_the_body_names_another_trace() -> None:
    body = b'{"id":"x","traceparent":"00-' + OTHER.encode() + b'-b7ad6b7169203331-01"}'
    assert body_trace_ids(body, SENT) == [OTHER]


def test_a_trace_id_member_names_a_trace() -> None:
    assert body_trace_ids(b'{"trace_id": "' + OTHER.encode() + b'"}', SENT) == [OTHER]
    assert body_trace_ids(b'{"traceId":"' + OTHER.encode() + b'"}', SENT) == [OTHER]


def test_the_sent_id_comes_first_and_each_id_once() -> None:
    body = (
        b'{"traceparent":"00-' + OTHER.encode() + b'-b7ad6b7169203331-01","trace_id":"' + OTHER.encode() + b'",'
        b'"echo":"00-' + SENT.encode() + b'-00f067aa0ba902b7-01"}'
    )
    assert body_trace_ids(body, SENT) == [SENT, OTHER]


def test_what_is_not_a_trace_id() -> None:
    # 32 hex digits with no trace shape around them (a content hash, a request id) say nothing of a trace
    assert body_trace_ids(b'{"id":"' + OTHER.encode() + b'","sha":"' + OTHER.encode() + b'"}', SENT) == []
    # the all-zero trace id is invalid (W3C Trace Context)
    assert body_trace_ids(b'{"traceparent":"00-' + b"0" * 32 + b'-b7ad6b7169203331-01"}', SENT) == []
    # a longer hex run is not a traceparent
    assert body_trace_ids(b"a00-" + OTHER.encode() + b"-b7ad6b7169203331-01ff", SENT) == []


def _streams_with(text: str, *, padding: int = 0) -> Handler:
    async def handler(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        first = chat_chunk(role="assistant", content="")
        first["x"] = "y" * padding
        first["trace"] = text
        await reply.send_event(first)
        await reply.send_event(chat_chunk("hi", finish_reason="stop"))
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    return handler


async def _stream(handler: Handler, *, trace_context: bool = True) -> list[str]:
    chat = get_dialect("openai.chat")
    async with StreamServer(handler) as server, Client(trace_context=trace_context) as c:
        t = await c.request(chat.build_request("m", "hi", 4), server.base_url)
    assert t.ok, t.error
    return t.body_trace_ids if t.trace_id is None else [i.replace(t.trace_id, "SENT") for i in t.body_trace_ids]


async def test_a_stream_that_echoes_the_sent_traceparent_names_it() -> None:
    async def handler(request: Received, reply: Reply) -> None:
        sent = request.header("traceparent") or ""
        await _streams_with(sent)(request, reply)

    assert await _stream(handler) == ["SENT"]


async def test_a_stream_naming_another_trace_names_it() -> None:
    assert await _stream(_streams_with(f"00-{OTHER}-b7ad6b7169203331-01")) == [OTHER]


async def test_only_the_first_bytes_of_a_stream_are_read() -> None:
    far = _streams_with(f"00-{OTHER}-b7ad6b7169203331-01", padding=RESPONSE_ID_SCAN_BYTES)
    assert await _stream(far) == []


async def test_a_request_without_a_traceparent_reads_no_trace_id() -> None:
    assert await _stream(_streams_with(f"00-{OTHER}-b7ad6b7169203331-01"), trace_context=False) == []


async def test_a_whole_json_body_is_read_too() -> None:
    async def handler(request: Received, reply: Reply) -> None:
        sent = (request.header("traceparent") or "").split("-")[1]
        body = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [], "trace_id": sent}
        await reply.send_json(200, body)

    async with StreamServer(handler) as server, Client() as c:
        t = await c.request(chat_spec(stream=False), server.base_url)
    assert t.trace_id is not None and t.body_trace_ids == [t.trace_id], (t.error, t.body_trace_ids)


def test_the_body_trace_ids_survive_serialisation_and_are_absent_when_none() -> None:
    t = Timeline(url="http://h/", trace_id=SENT, body_trace_ids=[SENT, OTHER])
    assert loads(dumps(t)).body_trace_ids == [SENT, OTHER]
    assert "body_trace_ids" not in timeline_to_dict(Timeline(url="http://h/"))
    assert loads(dumps(Timeline(url="http://h/"))).body_trace_ids == []
