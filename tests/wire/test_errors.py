"""Bad input, one case each: the failing phase is named, the message is clear, the partial timeline is kept."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import EventKind, Phase, Timeline
from latscope.wire import Client, ConnectError, StreamError, Timeouts, WireError, check
from tests.support.stream_server import SSE_HEADERS, Received, Reply, StreamServer, chat_chunk
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _request(handler: object, **client_args: object) -> Timeline:
    async with StreamServer(handler) as server, Client(**client_args) as client:  # type: ignore[arg-type]
        return await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))


async def test_connection_refused_names_the_connect_phase() -> None:
    port = _unused_port()
    async with Client() as client:
        t = await client.request(chat_spec(), f"http://127.0.0.1:{port}/v1", decoder=OpenAIStreamDecoder("chat"))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.CONNECT, "refused")
    assert t.error.message == f"TCP connect to 127.0.0.1:{port} failed: connection refused"
    assert t.connect_start_ns is not None and t.connect_end_ns is not None and t.ended_ns is not None
    assert t.send_start_ns is None
    with pytest.raises(ConnectError) as raised:
        check(t)
    assert raised.value.phase is Phase.CONNECT and raised.value.timeline is t


async def test_dns_failure_names_the_dns_phase() -> None:
    async with Client(timeouts=Timeouts(connect_s=5)) as client:
        t = await client.request(chat_spec(), "http://no-such-host.invalid/v1", decoder=OpenAIStreamDecoder("chat"))
    assert t.error is not None
    assert t.error.phase is Phase.DNS
    assert "no-such-host.invalid" in t.error.message
    assert t.dns_start_ns is not None and t.dns_end_ns is not None
    assert t.connect_start_ns is None


async def test_tls_verify_failure_names_the_tls_phase(pki: LocalPKI) -> None:
    async def never(request: Received, reply: Reply) -> None:
        raise AssertionError("no request can arrive over an unverified connection")

    async with StreamServer(never, ssl_context=pki.server_context()) as server, Client() as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.TLS, "cert-verify")
    assert t.error.message.startswith("TLS handshake failed: certificate verify failed")
    assert t.connect_end_ns is not None and t.tls_start_ns is not None and t.tls_end_ns is not None
    assert t.send_start_ns is None


async def test_reset_mid_stream_keeps_the_events_read_before() -> None:
    async def reset_after_five(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        for i in range(5):
            await reply.send_event(chat_chunk(f"t{i}"))
        await asyncio.sleep(0.05)  # let the client read them before the RST
        reply.reset()

    t = await _request(reset_after_five)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "reset")
    assert t.error.message.startswith("connection reset by peer while reading the stream (after 5 events")
    assert [e.kind for e in t.events] == [EventKind.CONTENT] * 5
    assert t.first_token_ns is not None and t.ended_ns is not None


async def test_truncated_chunked_body_is_a_stream_error() -> None:
    async def close_mid_body(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        for i in range(3):
            await reply.send_event(chat_chunk(f"t{i}"))
        reply.close()  # FIN without the terminating zero-size chunk

    t = await _request(close_mid_body)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "truncated")
    assert "closed the connection before the response body ended" in t.error.message
    assert len(t.events) == 3
    assert t.response_body_bytes > 0


async def test_non_sse_content_type_is_named_and_the_body_counted() -> None:
    body = orjson.dumps({"id": "x", "object": "chat.completion", "choices": []})

    async def json_reply(request: Received, reply: Reply) -> None:
        await reply.start(200, [("content-type", "application/json"), ("content-length", str(len(body)))])
        await reply.send(body)
        await reply.end()

    t = await _request(json_reply)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.HEADERS, "content-type")
    assert "application/json" in t.error.message
    assert t.response_body_bytes == len(body)
    assert t.status == 200 and t.events == []


@pytest.mark.parametrize("status", [401, 503])
async def test_http_error_status_surfaces_the_api_message(status: int) -> None:
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "bad_key"}}

    async def refuse(request: Received, reply: Reply) -> None:
        await reply.send_json(status, error)

    t = await _request(refuse)
    assert t.error is not None
    assert (t.error.phase, t.error.kind, t.error.status) == (Phase.HEADERS, "http-status", status)
    assert t.error.message.startswith(f"HTTP {status}")
    assert "Incorrect API key provided" in t.error.message
    assert t.status == status and t.response_body_bytes > 0


async def test_invalid_json_in_an_event_stops_with_the_decoders_message() -> None:
    async def bad_event(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk("a"))
        await reply.send_event(chat_chunk("b"))
        await asyncio.sleep(0.01)
        await reply.send(b'data: {"choices": [\n\n')
        await reply.send_event(chat_chunk("never recorded"))
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    t = await _request(bad_event)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "decode")
    assert t.error.message.startswith("invalid JSON in SSE event 3 (ending at stream byte")
    assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.CONTENT]


async def test_events_read_together_with_an_invalid_one_are_kept() -> None:
    async def good_then_bad_in_one_read(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        good = b"".join(b"data: " + orjson.dumps(chat_chunk(f"t{i}")) + b"\n\n" for i in range(3))
        await reply.send(good + b'data: {"choices": [\n\n' + b"data: [DONE]\n\n")  # one write: one read
        await reply.end()

    t = await _request(good_then_bad_in_one_read)
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "decode")
    assert "SSE event 4" in t.error.message
    assert [e.kind for e in t.events] == [EventKind.CONTENT] * 3
    assert len({e.read_index for e in t.events}) == 1
    assert t.first_token_ns == t.last_token_ns == t.events[0].at_ns


async def test_non_utf8_bytes_warn_with_the_offset_and_the_stream_goes_on() -> None:
    async def bad_bytes(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk("a"))
        raw = orjson.dumps(chat_chunk("XY")).replace(b"XY", b"X\xffY")
        await reply.send(b"data: " + raw + b"\n\n")
        await reply.send_event(chat_chunk("c"))
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    t = await _request(bad_bytes)
    assert t.ok, t.error
    assert [e.kind for e in t.events].count(EventKind.CONTENT) == 3
    assert any(w.startswith("invalid UTF-8 at stream byte ") for w in t.warnings), t.warnings


async def test_no_response_head_times_out_in_the_headers_phase() -> None:
    async def silent(request: Received, reply: Reply) -> None:
        await asyncio.sleep(5)

    t = await _request(silent, timeouts=Timeouts(headers_s=0.2))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.HEADERS, "timeout")
    assert "no response head within 0.2 s" in t.error.message
    assert t.send_end_ns is not None


async def test_a_stalled_stream_times_out_after_the_read_gap() -> None:
    async def stall(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk("a"))
        await asyncio.sleep(5)

    t = await _request(stall, timeouts=Timeouts(read_s=0.2))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "timeout")
    assert "no data for 0.2 s" in t.error.message
    assert len(t.events) == 1


async def test_total_timeout_names_the_phase_it_hit() -> None:
    async def slow_head(request: Received, reply: Reply) -> None:
        await asyncio.sleep(5)

    t = await _request(slow_head, timeouts=Timeouts(total_s=0.2))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.HEADERS, "timeout")
    assert "total timeout of 0.2 s" in t.error.message


async def test_a_malformed_url_is_an_error_not_an_exception() -> None:
    async with Client() as client:
        t = await client.request(chat_spec(), "ftp://example/v1")
    assert t.error is not None and t.error.kind == "url"


async def test_wire_error_reads_like_its_message() -> None:
    port = _unused_port()
    async with Client() as client:
        with pytest.raises(WireError, match="connection refused") as raised:
            await client.get(f"http://127.0.0.1:{port}/v1/models")
    assert raised.value.kind == "refused"
    assert not isinstance(raised.value, StreamError)


def test_an_error_without_a_phase_of_its_own_is_charged_to_the_latest_phase_the_marks_show() -> None:
    from latscope.timeline.model import Phase, Timeline

    t = Timeline(started_ns=1)
    assert t.phase_reached() is Phase.POOL
    steps = [
        ("dns_start_ns", Phase.DNS),
        ("connect_start_ns", Phase.CONNECT),
        ("tls_start_ns", Phase.TLS),
        ("connection_ready_ns", Phase.SEND),
        ("send_end_ns", Phase.HEADERS),
    ]
    for i, (mark, phase) in enumerate(steps, start=2):
        setattr(t, mark, i)
        assert t.phase_reached() is phase
    t.status = 200
    assert t.phase_reached() is Phase.STREAM
