"""Non-streamed responses (``"stream": false``): the whole JSON body is decoded at its end with the dialect's decoder.

No stream events are recorded; usage, finish reason, llama.cpp ``timings`` and the kept text are, and the first (and
last) token mark is the read that completed the body: every token arrives with it.
"""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects import openai
from latscope.dialects.base import RequestSpec
from latscope.signals.join import join_server_signals
from latscope.timeline import Phase, Timeline, metrics
from latscope.timeline.model import Usage
from latscope.wire import Client, exchange
from tests.support.httpfile import REAL
from tests.support.stream_server import Received, Reply, StreamServer
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec
from tests.wire.rawserver import RawServer, serve_each_request


async def replay(response: bytes, spec: RequestSpec | None = None) -> Timeline:
    async with RawServer(serve_each_request(response)) as server, Client(keep_text=True) as client:
        return await client.request(spec or chat_spec(stream=False), server.base_url)


def json_response(body: bytes, content_type: bytes = b"application/json") -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\ncontent-length: %d\r\n\r\n" % len(body)
    return head + body


async def test_a_llama_server_body_gives_usage_finish_timings_and_text() -> None:
    t = await replay((REAL / "llama-server.chat.nonstream.http").read_bytes())
    assert t.ok, t.error
    assert t.usage == Usage(prompt_tokens=65, completion_tokens=8, total_tokens=73, cached_tokens=64)
    assert t.finish_reason == "length"
    assert t.output_text == " model jo fic write finM dip faf"
    timings = t.server_fields["timings"]
    assert isinstance(timings, dict) and timings["predicted_n"] == 8
    assert t.events == []


async def test_a_llama_cpp_python_body_gives_usage_and_finish() -> None:
    t = await replay((REAL / "llama-cpp-python.chat.nonstream.http").read_bytes())
    assert t.ok, t.error
    assert t.usage is not None and t.usage.completion_tokens == 8
    assert t.finish_reason == "length" and "timings" not in t.server_fields


async def test_the_first_token_of_a_non_streamed_response_is_the_read_that_completed_the_body() -> None:
    t = await replay((REAL / "llama-server.chat.nonstream.http").read_bytes())
    assert t.first_token_ns is not None and t.first_token_ns == t.last_token_ns == t.reads[-1].at_ns
    assert t.headers_received_ns is not None and t.ended_ns is not None
    assert t.headers_received_ns <= t.first_token_ns <= t.ended_ns
    assert metrics.ttft_ms(t) is not None


async def test_server_timings_of_a_non_streamed_body_join_like_a_streams() -> None:
    t = await replay((REAL / "llama-server.chat.nonstream.http").read_bytes())
    join_server_signals(t)
    sources = {m.source for m in t.server}
    assert "body:timings.prompt_ms" in sources and "body:timings.predicted_ms" in sources


async def test_a_completions_body_is_decoded_in_its_mode() -> None:
    body = orjson.dumps(
        {
            "object": "text_completion",
            "choices": [{"index": 0, "text": " one two", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )
    spec = openai.completions_request("m", "count", 8, stream=False)
    t = await replay(json_response(body), spec)
    assert t.ok, t.error
    assert (t.output_text, t.finish_reason) == (" one two", "stop")
    assert t.usage is not None and t.usage.completion_tokens == 2


async def test_an_error_object_in_a_2xx_body_fails_the_request_with_its_message() -> None:
    body = orjson.dumps({"error": {"message": "the model is loading", "type": "unavailable_error"}})
    t = await replay(json_response(body))
    assert t.error is not None
    assert (t.error.phase, t.error.kind) == (Phase.STREAM, "api-error")
    assert "the model is loading" in t.error.message


async def test_a_body_that_is_not_json_is_counted_not_decoded() -> None:
    t = await replay(json_response(b"hello", b"text/plain"))
    assert t.ok and t.response_body_bytes == 5
    assert t.usage is None and t.first_token_ns is None and t.warnings == []


async def test_an_undecodable_json_body_is_a_warning_not_a_failure() -> None:
    t = await replay(json_response(b'{"choices": ['))
    assert t.ok, t.error
    assert any(w.startswith("the response body could not be decoded") for w in t.warnings), t.warnings


async def test_a_body_larger_than_the_decode_limit_is_counted_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange, "MAX_DECODED_BODY_BYTES", 100)
    body = orjson.dumps({"choices": [{"index": 0, "message": {"content": "x" * 500}, "finish_reason": "stop"}]})
    t = await replay(json_response(body))
    assert t.ok and t.response_body_bytes == len(body)
    assert t.finish_reason is None and t.output_text is None
    assert any("was not decoded" in w for w in t.warnings), t.warnings


async def test_a_non_streamed_response_over_http2_is_decoded(pki: LocalPKI) -> None:
    body = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
    }

    async def answer(request: Received, reply: Reply) -> None:
        await reply.send_json(200, body)

    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with StreamServer(answer, ssl_context=ctx) as server, Client(ca_file=pki.ca_file, keep_text=True) as client:
        t = await client.request(chat_spec(stream=False), server.base_url)
    assert t.ok, t.error
    assert t.connection is not None and t.connection.http_version == "HTTP/2"
    assert (t.output_text, t.finish_reason) == ("hi", "stop")
    assert t.usage is not None and t.usage.completion_tokens == 1
    assert t.first_token_ns == t.reads[-1].at_ns
