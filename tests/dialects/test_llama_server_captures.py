"""Anthropic Messages and OpenAI Responses on a real server's bytes: llama.cpp's ``llama-server`` serves both
(``/v1/messages``, ``/v1/responses``) beside its OpenAI routes. The captures (tests/fixtures/real/, six tokens each)
are decoded by the registered dialects exactly as the client decodes a stream: token count, kinds, finish reason
and usage as the server reported them, and no warning about a shape the decoder did not expect."""

from __future__ import annotations

import pytest

from latscope.dialects import get_dialect
from latscope.dialects.base import Chunk
from latscope.timeline.model import EventKind
from tests.support.httpfile import load_capture

#: dialect → the capture of its stream and of its non-streamed body
CAPTURES = {
    "anthropic.messages": (
        "llama-server.anthropic.messages.stream.http",
        "llama-server.anthropic.messages.nonstream.http",
    ),
    "openai.responses": ("llama-server.openai.responses.stream.http", "llama-server.openai.responses.nonstream.http"),
}
TOKENS = 6  # max_tokens / max_output_tokens of every capture


def _decode(dialect: str, pieces: list[bytes]) -> tuple[list[Chunk], list[str]]:
    decoder = get_dialect(dialect).new_decoder()
    chunks = [chunk for piece in pieces for chunk in decoder.feed(piece)]
    chunks += decoder.close()
    return chunks, list(decoder.warnings)


@pytest.mark.parametrize("dialect", sorted(CAPTURES))
def test_the_real_stream_gives_its_tokens_finish_and_usage_without_warnings(dialect: str) -> None:
    capture = load_capture(CAPTURES[dialect][0])
    assert capture.status == 200 and capture.header("content-type") == "text/event-stream"
    chunks, warnings = _decode(dialect, capture.chunks)
    assert warnings == []  # this includes the end-of-stream warning: the stream's terminal event was seen
    content = [c for c in chunks if c.kind is EventKind.CONTENT]
    assert len(content) == TOKENS and sum(c.tokens for c in chunks) == TOKENS
    assert "".join(c.text or "" for c in content)  # gibberish from a random model, but text
    finish = [c for c in chunks if c.finish_reason is not None]
    assert finish, [c.kind for c in chunks]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and usage[-1].completion_tokens == TOKENS


@pytest.mark.parametrize("dialect", sorted(CAPTURES))
def test_the_real_stream_read_by_read_decodes_as_it_does_whole(dialect: str) -> None:
    body = load_capture(CAPTURES[dialect][0]).body
    whole, _ = _decode(dialect, [body])
    for size in (1, 7, 64):
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        assert _decode(dialect, pieces)[0] == whole


@pytest.mark.parametrize("dialect", sorted(CAPTURES))
def test_the_real_body_decodes_with_its_usage(dialect: str) -> None:
    capture = load_capture(CAPTURES[dialect][1])
    decoded = get_dialect(dialect).decode_response(capture.body)
    assert decoded.text and decoded.finish_reason
    assert decoded.usage is not None and decoded.usage.completion_tokens == TOKENS
