"""The lab never falls over: bad input gets a clear error, abusive clients get cut off, departed clients free
their resources, and the next request is served as if nothing happened."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time

import orjson
import pytest

from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.wire import Client
from tests.lab import rawhttp

QUICK = CostModel.default().with_overrides(
    prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=1.0, decode_per_seq_ms=0.0
)
#: Slow enough that a stream is still running when the client hangs up.
SLOW = QUICK.with_overrides(decode_base_ms=5.0)


async def _still_serving(lab: Lab) -> None:
    response = await rawhttp.exchange(
        lab.host,
        lab.port,
        rawhttp.post("/v1/chat/completions", rawhttp.chat_body(2)),
        until=b'"finish_reason":"length"',
        timeout=10,
    )
    assert response.data.startswith(b"HTTP/1.1 200 ")


async def _engine_idle(lab: Lab, timeout: float = 3.0) -> bool:
    """Poll (bounded) until nothing runs or waits and the KV cache is empty."""
    for _ in range(int(timeout / 0.01)):
        scheduler = lab.scheduler
        if scheduler.running == 0 and scheduler.waiting == 0 and scheduler.kv_usage == 0.0:
            return True
        await asyncio.sleep(0.01)
    return False


def _error_of(response: rawhttp.RawResponse) -> tuple[int, dict[str, object]]:
    ((head, body),) = response.responses()[:1]
    return head.status_code, orjson.loads(body)["error"]


async def test_malformed_json_gets_a_400_and_the_connection_stays_usable() -> None:
    async with Lab(cost=QUICK) as lab:
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(rawhttp.post("/v1/chat/completions", b'{"model": "lab-model", "messages": [{"role": '))
        assert await conn.wait_for(b"}}", 5)
        conn.send(rawhttp.post("/v1/chat/completions", rawhttp.chat_body(2)))
        assert await conn.wait_for(b"HTTP/1.1 200", 5)
        conn.close()
        (first, first_body), *_ = conn.response.responses()
    assert first.status_code == 400
    assert orjson.loads(first_body)["error"]["type"] == "invalid_request_error"


async def test_wrong_types_get_a_400_naming_the_parameter() -> None:
    async with Lab(cost=QUICK) as lab:
        body = orjson.dumps({"model": "lab-model", "messages": [{"role": "user", "content": 42}]})
        status, error = _error_of(
            await rawhttp.exchange(lab.host, lab.port, rawhttp.post("/v1/chat/completions", body), until=b"}}")
        )
        await _still_serving(lab)
    assert status == 400 and error["param"] == "messages[0].content" and error["code"] == "invalid_type"


async def test_missing_fields_get_a_400() -> None:
    async with Lab(cost=QUICK) as lab:
        chat = await rawhttp.exchange(
            lab.host, lab.port, rawhttp.post("/v1/chat/completions", b'{"model": "lab-model"}'), until=b"}}"
        )
        completion = await rawhttp.exchange(
            lab.host, lab.port, rawhttp.post("/v1/completions", b'{"model": "lab-model"}'), until=b"}}"
        )
    assert _error_of(chat)[0] == 400 and _error_of(chat)[1]["param"] == "messages"
    assert _error_of(completion)[0] == 400 and _error_of(completion)[1]["param"] == "prompt"


async def test_bad_max_tokens_gets_a_400() -> None:
    async with Lab(cost=QUICK) as lab:
        response = await rawhttp.exchange(
            lab.host, lab.port, rawhttp.post("/v1/chat/completions", rawhttp.chat_body(-3)), until=b"}}"
        )
    status, error = _error_of(response)
    assert status == 400 and error["param"] == "max_tokens"


async def test_unknown_model_gets_a_404_model_not_found() -> None:
    async with Lab(cost=QUICK) as lab:
        response = await rawhttp.exchange(
            lab.host, lab.port, rawhttp.post("/v1/chat/completions", rawhttp.chat_body(2, model="gpt-x")), until=b"}}"
        )
        await _still_serving(lab)
    status, error = _error_of(response)
    assert status == 404 and error["code"] == "model_not_found"


async def test_oversize_body_gets_a_413_before_it_is_read() -> None:
    async with Lab(cost=QUICK, max_body_bytes=64 * 1024) as lab:
        body = rawhttp.chat_body(2, user="x" * 300_000)
        response = await rawhttp.exchange(lab.host, lab.port, rawhttp.post("/v1/chat/completions", body), timeout=10)
        await _still_serving(lab)
    status, error = _error_of(response)
    assert status == 413 and error["code"] == "request_too_large"
    assert response.closed_ns is not None  # the server hung up after answering


async def test_oversize_chunked_body_gets_a_413_too() -> None:
    async with Lab(cost=QUICK, max_body_bytes=64 * 1024) as lab:
        piece = b"x" * 32 * 1024
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: lab\r\ntransfer-encoding: chunked\r\n"
            b"content-type: application/json\r\n\r\n"
        )
        chunks = b"".join(b"%x\r\n%b\r\n" % (len(piece), piece) for _ in range(4)) + b"0\r\n\r\n"
        response = await rawhttp.exchange(lab.host, lab.port, head + chunks, timeout=10)
    assert _error_of(response)[0] == 413


async def test_malformed_http_gets_a_400_and_the_server_keeps_serving() -> None:
    async with Lab(cost=QUICK) as lab:
        response = await rawhttp.exchange(lab.host, lab.port, b"\x16\x03\x01 garbage that is not HTTP\r\n\r\n")
        await _still_serving(lab)
    assert response.data.startswith(b"HTTP/1.1 400 ")
    assert response.closed_ns is not None


async def test_oversize_headers_get_a_431() -> None:
    async with Lab(cost=QUICK, max_header_bytes=4096) as lab:
        request = rawhttp.post("/v1/chat/completions", rawhttp.chat_body(2), extra_headers=[("x-bloat", "b" * 8192)])
        response = await rawhttp.exchange(lab.host, lab.port, request)
        await _still_serving(lab)
    assert response.data.startswith(b"HTTP/1.1 431 ")


async def test_slowloris_headers_are_cut_off_after_the_header_timeout() -> None:
    timeout_s = 0.3
    async with Lab(cost=QUICK, header_timeout_s=timeout_s) as lab:
        attacker = await rawhttp.RawConnection.open(lab.host, lab.port)
        started = time.monotonic()
        attacker.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: lab\r\n")
        for index in range(40):  # one header line every 50 ms, for up to 2 s: never finishing the head
            if attacker.response.closed_ns is not None:
                break
            attacker.send(f"x-slow-{index}: a\r\n".encode())
            await asyncio.sleep(0.05)
        closed = await attacker.wait_closed(5)
        held_s = time.monotonic() - started
        await _still_serving(lab)  # others were served all along
    assert closed
    assert held_s < 6 * timeout_s  # generous: the point is that it did not last the 2 s the client wanted
    assert attacker.response.data.startswith(b"HTTP/1.1 408 ")


async def test_a_silent_connection_is_closed_after_the_header_timeout() -> None:
    async with Lab(cost=QUICK, header_timeout_s=0.2) as lab:
        silent = await rawhttp.RawConnection.open(lab.host, lab.port)
        assert await silent.wait_closed(3)


async def test_idle_keepalive_connections_close_after_the_keepalive_timeout() -> None:
    async with Lab(cost=QUICK, keepalive_timeout_s=0.2) as lab:
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(rawhttp.get("/health"))
        assert await conn.wait_for(b'"status":"ok"', 5)
        assert await conn.wait_closed(3)


async def test_head_gets_the_head_only() -> None:
    async with Lab(cost=QUICK) as lab:
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(b"HEAD /health HTTP/1.1\r\nhost: lab\r\n\r\n")
        assert await conn.wait_for(b"\r\n\r\n", 5)
        conn.send(rawhttp.get("/health"))  # the connection is still in step: the next answer parses
        assert await conn.wait_for(b'"status":"ok"', 5)
        conn.close()
    head, body = conn.response.data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: " in head
    assert body.startswith(b"HTTP/1.1 200 ")


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with Lab(cost=QUICK) as lab:
        response = await rawhttp.exchange(
            lab.host, lab.port, rawhttp.get("/health") + rawhttp.get("/v1/models"), until=b'"object":"list"'
        )
    assert response.data.index(b'"status":"ok"') < response.data.index(b'"object":"list"')


async def test_expect_100_continue_is_answered_at_once() -> None:
    async with Lab(cost=QUICK) as lab:
        body = rawhttp.chat_body(2)
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(
            rawhttp.post(
                "/v1/chat/completions", b"", extra_headers=[("expect", "100-continue")], content_length=len(body)
            )
        )
        assert await conn.wait_for(b"HTTP/1.1 100 ", 2)
        conn.send(body)
        assert await conn.wait_for(b"HTTP/1.1 200 ", 5)
        conn.close()


def _noise(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Warnings and errors logged (a departed client is business as usual: nothing to log)."""
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


async def test_client_disconnect_mid_stream_frees_the_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with Lab(cost=SLOW) as lab:
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(rawhttp.post("/v1/chat/completions", rawhttp.chat_body(500, stream=True)))
        assert await conn.wait_for(b'"content"', 5, count=3)  # streaming
        assert lab.scheduler.running == 1 and lab.scheduler.kv_usage > 0
        conn.abort()
        assert await _engine_idle(lab)
        await _still_serving(lab)
        record = next(r for r in lab.records if r.stream)
    assert record.cancelled and record.completion_tokens < 500
    assert _noise(caplog) == []


async def test_client_disconnect_while_queued_frees_the_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    # A 50 ms batching window waiting for 8 requests holds a lone request in the queue.
    async with Lab(cost=SLOW, faults=("batching-window",), batch_window_ms=400.0) as lab:
        conn = await rawhttp.RawConnection.open(lab.host, lab.port)
        conn.send(rawhttp.post("/v1/chat/completions", rawhttp.chat_body(50, stream=True)))
        for _ in range(200):  # bounded wait until the request is queued
            if lab.scheduler.waiting:
                break
            await asyncio.sleep(0.005)
        assert lab.scheduler.waiting == 1
        conn.close()
        assert await _engine_idle(lab)
        record = lab.records[-1]
    assert record.cancelled and record.status == 499 and record.completion_tokens == 0
    assert _noise(caplog) == []


async def test_http2_stream_reset_frees_the_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with Lab(cost=SLOW, tls=True) as lab, Client(ca_file=str(lab.cert_path)) as client:
        task = asyncio.ensure_future(client.request(chat_request("lab-model", "hello", 500), lab.url))
        for _ in range(300):  # bounded wait until tokens flow
            if lab.scheduler.running and lab.scheduler.kv_usage > 0:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await _engine_idle(lab)
        follow_up = await client.request(chat_request("lab-model", "hello", 3), lab.url)
    assert follow_up.error is None
    assert _noise(caplog) == []


def _h2_frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


async def test_an_http2_frame_over_the_max_frame_size_is_refused_and_the_server_keeps_serving() -> None:
    # RFC 9113 §4.2: a frame longer than SETTINGS_MAX_FRAME_SIZE (16 384 by default) is a connection error
    # FRAME_SIZE_ERROR (6): GOAWAY and close
    import hpack

    async with Lab(cost=QUICK, tls=True) as lab:
        assert lab.cert_path is not None
        context = ssl.create_default_context(cafile=str(lab.cert_path))
        context.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.open_connection(lab.host, lab.port, ssl=context, server_hostname="localhost")
        head = hpack.Encoder().encode(
            [(":method", "POST"), (":path", "/v1/chat/completions"), (":scheme", "https"), (":authority", "lab")]
        )
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(4, 0, 0, b"")
        writer.write(preface + _h2_frame(1, 4, 1, head) + _h2_frame(0, 0, 1, b"x" * 20_000))
        await writer.drain()
        received = b""
        while chunk := await asyncio.wait_for(reader.read(65536), 5):  # bounded: the server closes
            received += chunk
        writer.close()
        goaway = [
            int.from_bytes(received[i + 13 : i + 17], "big")
            for i in _frame_offsets(received)
            if received[i + 3] == 7  # GOAWAY: last stream id, then the error code
        ]
        assert goaway == [6], received[:200]
        async with Client(ca_file=str(lab.cert_path)) as client:
            after = await client.request(chat_request("lab-model", "hello", 3), lab.url)
        assert after.error is None and after.connection is not None and after.connection.http_version == "HTTP/2"


def _frame_offsets(data: bytes) -> list[int]:
    offsets, i = [], 0
    while i + 9 <= len(data):
        offsets.append(i)
        i += 9 + int.from_bytes(data[i : i + 3], "big")
    return offsets


async def test_garbage_on_the_tls_port_does_not_disturb_the_server() -> None:
    async with Lab(cost=QUICK, tls=True) as lab:
        assert lab.cert_path is not None
        plain = await rawhttp.exchange(lab.host, lab.port, rawhttp.get("/health"), timeout=5)
        context = ssl.create_default_context(cafile=str(lab.cert_path))

        def fetch() -> bytes:
            with (
                socket.create_connection((lab.host, lab.port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname="localhost") as tls,
            ):
                tls.sendall(rawhttp.get("/health"))
                return tls.recv(65536)

        answer = await asyncio.to_thread(fetch)
    assert plain.closed_ns is not None and not plain.data.startswith(b"HTTP/1.1 200")
    assert answer.startswith(b"HTTP/1.1 200 ")


async def test_stop_with_streams_in_flight_is_clean(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    lab = Lab(cost=SLOW)
    await lab.start()
    conns = [await rawhttp.RawConnection.open(lab.host, lab.port) for _ in range(3)]
    for conn in conns:
        conn.send(rawhttp.post("/v1/chat/completions", rawhttp.chat_body(500, stream=True)))
    for conn in conns:
        assert await conn.wait_for(b'"content"', 5)
    await asyncio.wait_for(lab.stop(), 5)
    for conn in conns:
        assert await conn.wait_closed(3)
    assert lab.scheduler.running == 0
    assert _noise(caplog) == []
