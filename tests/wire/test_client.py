"""Client API details: request headers and their redaction, trace context, GET, TCP_INFO, quickack, kept text."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable

import orjson
import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import EventKind, Phase, Timeline, metrics
from latscope.timeline.model import ConnectionInfo
from latscope.timeline.serialize import dumps, loads, timeline_from_dict, timeline_to_dict
from latscope.wire import Client, Response, WireError, tcpinfo
from latscope.wire.trace import new_traceparent
from tests.support.stream_server import (
    SSE_HEADERS,
    Received,
    Reply,
    StreamServer,
    chat_chunk,
    models_handler,
    paced_stream,
)
from tests.wire.conftest import chat_spec


async def test_request_headers_are_sent_and_stored_redacted() -> None:
    client_headers = [("Authorization", "Bearer sk-secret"), ("X-Team", "a")]
    async with StreamServer(paced_stream(1)) as server, Client(headers=client_headers) as client:
        t = await client.request(
            chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), headers=[("X-Team", "b")]
        )
    sent = server.requests[0]
    assert sent.header("authorization") == "Bearer sk-secret"
    assert sent.header("x-team") == "b"  # the call's header replaces the client's
    assert sent.header("host") == f"127.0.0.1:{server.port}"
    assert sent.header("content-length") == str(len(chat_spec().body))
    assert t.request_headers["authorization"] == "[redacted]"
    assert "sk-secret" not in repr(t)
    assert t.url == f"{server.base_url}/chat/completions"


async def test_each_request_gets_a_fresh_traceparent() -> None:
    async with StreamServer(paced_stream(1)) as server, Client() as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    values = [r.header("traceparent") for r in server.requests]
    assert values[0] is not None and values[1] is not None and values[0] != values[1]
    version, trace_id, span_id, flags = values[0].split("-")
    assert (version, len(trace_id), len(span_id), flags) == ("00", 32, 16, "01")
    assert first.trace_id == trace_id and second.trace_id != first.trace_id


async def test_trace_context_can_be_switched_off() -> None:
    async with StreamServer(paced_stream(1)) as server, Client(trace_context=False) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert server.requests[0].header("traceparent") is None and t.trace_id is None


async def test_get_returns_status_headers_and_body() -> None:
    async with StreamServer(models_handler(paced_stream(1), ("a", "b"))) as server, Client() as client:
        response = await client.get(f"{server.base_url}/models")
    assert isinstance(response, Response)
    assert response.status == 200 and response.header("Content-Type") == "application/json"
    assert [m["id"] for m in response.json()["data"]] == ["a", "b"]
    assert response.timeline.method == "GET" and response.timeline.ok


async def test_get_of_an_error_status_returns_it_and_raise_for_status_raises() -> None:
    async def missing(request: Received, reply: Reply) -> None:
        await reply.send_json(404, {"error": {"message": "no such route"}})

    async with StreamServer(missing) as server, Client() as client:
        response = await client.get(f"{server.base_url}/metrics")
    assert response.status == 404
    with pytest.raises(WireError, match="no such route"):
        response.raise_for_status()


async def test_tcp_info_is_recorded_at_headers_and_end() -> None:
    async with StreamServer(paced_stream(3)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.connection is not None
    at_headers, at_end = t.connection.tcp_info_at_headers, t.connection.tcp_info_at_end
    assert at_headers is not None and at_end is not None
    assert at_headers.rtt_us > 0 and at_headers.snd_cwnd > 0
    assert at_end.min_rtt_us is not None and at_end.min_rtt_us <= at_end.rtt_us + at_end.rttvar_us
    assert t.connection.remote_address == "127.0.0.1" and t.connection.remote_port == server.port
    # loopback's segments are tens of KB (a 65536-byte MTU), whatever the small events left rcv_mss at
    assert at_end.snd_mss is not None and at_end.snd_mss > 8192, at_end


def test_tcp_info_parsing_reads_the_struct_offsets() -> None:
    raw = bytearray(232)
    for offset, value in ((12, 40_000), (68, 150), (72, 30), (80, 10), (100, 2), (148, 90)):
        struct.pack_into("=I", raw, offset, value)
    info = tcpinfo.parse_tcp_info(bytes(raw))
    assert info is not None
    assert (info.ato_us, info.rtt_us, info.rttvar_us, info.snd_cwnd, info.total_retrans, info.min_rtt_us) == (
        40_000,
        150,
        30,
        10,
        2,
        90,
    )
    assert tcpinfo.parse_tcp_info(bytes(raw[:120])) is not None
    assert tcpinfo.parse_tcp_info(bytes(raw[:120])).min_rtt_us is None  # type: ignore[union-attr]
    assert tcpinfo.parse_tcp_info(b"\0" * 50) is None


def test_tcp_info_reads_the_segment_size_the_backlog_and_the_delivery_rate() -> None:
    raw = bytearray(232)
    for offset, value in ((16, 1460), (20, 1448), (24, 3)):
        struct.pack_into("=I", raw, offset, value)
    struct.pack_into("=Q", raw, 160, 2_500_000)
    info = tcpinfo.parse_tcp_info(bytes(raw))
    assert info is not None
    assert (info.snd_mss, info.rcv_mss, info.unacked, info.delivery_rate_bps) == (1460, 1448, 3, 2_500_000)
    old = tcpinfo.parse_tcp_info(bytes(raw[:120]))  # a kernel before 4.6
    assert old is not None and (old.snd_mss, old.rcv_mss) == (1460, 1448)


async def test_the_send_backlog_is_empty_once_the_peer_has_everything() -> None:
    async with StreamServer(paced_stream(2)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        assert t.ok
        assert client.send_backlog(t) == 0  # the request was answered: the server had all of it
    assert client.send_backlog(t) is None  # the client closed: nothing to ask


@pytest.mark.skipif(not tcpinfo.quickack_supported(), reason="TCP_QUICKACK is Linux-only")
async def test_quickack_mode_sets_the_option_before_every_read(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool | None] = []
    real = tcpinfo.set_quickack

    def spy(sock: socket.socket) -> None:
        real(sock)
        calls.append(tcpinfo.quickack_enabled(sock))

    monkeypatch.setattr("latscope.wire.transport.set_quickack", spy)
    async with StreamServer(paced_stream(10, 0.002)) as server, Client(quickack=True) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok and t.connection is not None and t.connection.quickack is True
    assert len(calls) >= len(t.reads) + 1  # every read, plus after sending
    assert all(calls)  # the kernel reported the option on right after it was set


@pytest.mark.skipif(not tcpinfo.quickack_supported(), reason="TCP_QUICKACK is Linux-only")
async def test_delayed_ack_mode_starts_new_connections_in_it_and_keeps_them_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at_connect: list[bool | None] = []
    after_read: list[bool | None] = []
    real = tcpinfo.set_delayed_ack

    def spy(into: list[bool | None]) -> Callable[[socket.socket], bool]:
        def set_and_look(sock: socket.socket) -> bool:
            applied = real(sock)
            into.append(tcpinfo.quickack_enabled(sock))
            return applied

        return set_and_look

    monkeypatch.setattr("latscope.wire.connection.set_delayed_ack", spy(at_connect))
    monkeypatch.setattr("latscope.wire.transport.set_delayed_ack", spy(after_read))
    async with StreamServer(paced_stream(5, 0.002)) as server, Client(delayed_ack=True) as client:
        first = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        second = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert first.ok and second.ok
    assert first.connection is not None and first.connection.delayed_ack is True
    assert first.connection.quickack is False
    assert second.connection is not None and second.connection.delayed_ack and second.connection.reused
    assert at_connect == [False]  # once, for the one new connection: the kernel reports quick ACKs off
    assert len(after_read) == len(first.reads) + len(second.reads) and not any(after_read)


async def test_delayed_ack_is_off_by_default_and_excludes_quickack(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[socket.socket] = []
    monkeypatch.setattr("latscope.wire.connection.set_delayed_ack", calls.append)
    monkeypatch.setattr("latscope.wire.transport.set_delayed_ack", calls.append)
    async with StreamServer(paced_stream(2)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.connection is not None and t.connection.delayed_ack is False
    assert calls == []
    with pytest.raises(ValueError, match="opposite"):
        Client(quickack=True, delayed_ack=True)


def test_delayed_ack_survives_serialisation_and_old_records_read_as_off() -> None:
    t = Timeline(connection=ConnectionInfo(connection_id=1, reused=False, delayed_ack=True))
    assert loads(dumps(t)).connection == t.connection
    record = timeline_to_dict(t)
    del record["connection"]["delayed_ack"]  # a record written before the field existed
    old = timeline_from_dict(record).connection
    assert old is not None and old.delayed_ack is False


async def test_quickack_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[socket.socket] = []
    monkeypatch.setattr("latscope.wire.transport.set_quickack", calls.append)
    async with StreamServer(paced_stream(2)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert calls == [] and t.connection is not None and t.connection.quickack is False


async def test_keep_text_keeps_the_generated_text() -> None:
    async with StreamServer(paced_stream(3)) as server, Client(keep_text=True) as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.output_text == "tok0 tok1 tok2 "


async def test_a_non_streamed_request_records_no_stream_events() -> None:
    async def plain(request: Received, reply: Reply) -> None:
        await reply.send_json(200, {"object": "chat.completion", "choices": []})

    async with StreamServer(plain) as server, Client() as client:
        t = await client.request(chat_spec(stream=False), server.base_url)
    assert t.ok and t.events == [] and t.response_body_bytes > 0
    assert t.first_token_ns is None  # nothing was generated (tests/wire/test_nonstreamed.py has the decoding)


async def test_a_large_body_is_sent_whole_and_upload_time_recorded() -> None:
    spec = chat_spec()
    padded = spec.body[:-1] + b',"user":"' + b"x" * 2_000_000 + b'"}'
    big = type(spec)(spec.method, spec.path, padded, spec.headers, spec.dialect, spec.model)
    async with StreamServer(paced_stream(1)) as server, Client() as client:
        t = await client.request(big, server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok, t.error
    assert len(server.requests[0].body) == len(padded) == t.request_body_bytes
    assert t.send_start_ns is not None and t.send_end_ns is not None and t.send_end_ns > t.send_start_ns
    assert t.events[-1].kind is EventKind.DONE


async def test_a_streamed_request_without_a_decoder_uses_the_dialects() -> None:
    async with StreamServer(paced_stream(3)) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url)  # "stream": true in the body, dialect openai.chat
    assert t.ok and [e.kind for e in t.events].count(EventKind.CONTENT) == 3 and t.dialect == "openai.chat"


async def test_an_error_event_in_the_stream_fails_the_request_with_its_message() -> None:
    async def error_mid_stream(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk("a"))
        await reply.send(b'data: {"error": {"message": "model overloaded", "type": "server_error"}}\n\n')
        await reply.end()

    async with StreamServer(error_mid_stream) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "api-error")
    assert "model overloaded" in t.error.message
    assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.ERROR]


async def test_events_coalesced_in_one_read_share_its_stamp() -> None:
    async def burst(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        payload = b"".join(b"data: " + orjson.dumps(chat_chunk(f"t{i}")) + b"\n\n" for i in range(5))
        await reply.send(payload + b"data: [DONE]\n\n")  # one write: one chunk, one read
        await reply.end()

    async with StreamServer(burst) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url)
    assert t.ok
    content = [e for e in t.events if e.kind is EventKind.CONTENT]
    assert len({e.at_ns for e in content}) == 1 and len({e.read_index for e in content}) == 1
    assert max(metrics.token_events_per_read(t)) == 5
    assert metrics.itl_ms(t) == [0.0] * 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_does_not_repeat_its_parents_trace_ids() -> None:
    new_traceparent()  # the parent holds ids drawn ahead
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write_end, new_traceparent()[1].encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child_id = os.read(read_end, 64).decode()
    os.close(read_end)
    os.close(write_end)
    assert len(child_id) == 32 and child_id != new_traceparent()[1]
