"""The OpenAI dialect on real servers' bytes (tests/fixtures/real/, see its README for what each shows)."""

from __future__ import annotations

import pytest

from latscope.dialects.base import Chunk
from latscope.dialects.openai import (
    OpenAIStreamDecoder,
    decode_error_body,
    decode_response_body,
    parse_models,
)
from latscope.timeline.model import EventKind, Usage
from tests.support.httpfile import load_capture

R, C, F, U, D = EventKind.ROLE, EventKind.CONTENT, EventKind.FINISH, EventKind.USAGE, EventKind.DONE


def decode(name: str, mode: str = "chat", *, whole: bool = False) -> tuple[list[Chunk], OpenAIStreamDecoder]:
    capture = load_capture(name)
    decoder = OpenAIStreamDecoder(mode)
    feeds = [capture.body] if whole else capture.chunks
    chunks = [chunk for feed in feeds for chunk in decoder.feed(feed)]
    chunks += decoder.close()
    return chunks, decoder


def content_tokens(chunks: list[Chunk]) -> int:
    return sum(chunk.tokens for chunk in chunks if chunk.kind.carries_tokens)


def the_usage(chunks: list[Chunk]) -> Usage:
    usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usages) == 1
    return usages[0]


# -- llama-server ------------------------------------------------------------------------------------------------


def test_llama_server_chat_kinds() -> None:
    chunks, decoder = decode("llama-server.chat.stream.http")
    assert [chunk.kind for chunk in chunks] == [R, *[C] * 8, F, U, D]
    assert decoder.warnings == []


def test_llama_server_chat_tokens_equal_reported_completion_tokens() -> None:
    chunks, _ = decode("llama-server.chat.stream.http")
    assert content_tokens(chunks) == the_usage(chunks).completion_tokens == 8


def test_llama_server_chat_text() -> None:
    chunks, _ = decode("llama-server.chat.stream.http")
    assert "".join(chunk.text for chunk in chunks) == " model jo fic write finM dip faf"


def test_llama_server_chat_usage_with_cached_tokens() -> None:
    chunks, _ = decode("llama-server.chat.stream.http")
    assert the_usage(chunks) == Usage(prompt_tokens=65, completion_tokens=8, total_tokens=73, cached_tokens=0)


def test_llama_server_chat_timings_kept_raw_on_the_usage_chunk() -> None:
    chunks, _ = decode("llama-server.chat.stream.http")
    usage_chunk = chunks[-2]
    assert usage_chunk.timings is not None
    assert usage_chunk.timings["predicted_n"] == 8
    assert usage_chunk.timings["prompt_ms"] == 18.214


def test_llama_server_chat_finish_reason() -> None:
    chunks, _ = decode("llama-server.chat.stream.http")
    assert [chunk.finish_reason for chunk in chunks if chunk.finish_reason] == ["length"]


def test_llama_server_completions_kinds() -> None:
    chunks, decoder = decode("llama-server.completions.stream.http", "completions")
    assert [chunk.kind for chunk in chunks] == [*[C] * 6, F, D]
    assert decoder.warnings == []


def test_llama_server_completions_tokens_equal_reported_completion_tokens() -> None:
    chunks, _ = decode("llama-server.completions.stream.http", "completions")
    assert content_tokens(chunks) == the_usage(chunks).completion_tokens == 6


def test_llama_server_completions_finish_chunk_carries_usage_and_timings() -> None:
    chunks, _ = decode("llama-server.completions.stream.http", "completions")
    finish = chunks[-2]
    assert finish.usage == Usage(prompt_tokens=6, completion_tokens=6, total_tokens=12, cached_tokens=2)
    assert finish.timings is not None and finish.timings["cache_n"] == 2


# -- llama-cpp-python ----------------------------------------------------------------------------------------------


def test_llama_cpp_python_chat_kinds_without_usage() -> None:
    chunks, decoder = decode("llama-cpp-python.chat.stream.http")
    assert [chunk.kind for chunk in chunks] == [R, *[C] * 8, F, D]
    assert all(chunk.usage is None and chunk.timings is None for chunk in chunks)
    assert decoder.warnings == []


def test_llama_cpp_python_chat_text() -> None:
    chunks, _ = decode("llama-cpp-python.chat.stream.http")
    assert "".join(chunk.text for chunk in chunks) == " model jo fic write za dud numbergi"


# -- transformers serve --------------------------------------------------------------------------------------------


def test_transformers_kinds_end_with_a_finish_chunk_and_no_done() -> None:
    chunks, _ = decode("transformers-serve.chat.stream.http")
    assert [chunk.kind for chunk in chunks] == [R, C, C, C, F]


def test_transformers_usage_arrives_on_the_finish_chunk() -> None:
    chunks, _ = decode("transformers-serve.chat.stream.http")
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage == Usage(prompt_tokens=26, completion_tokens=8, total_tokens=34)


def test_transformers_missing_done_is_a_warning_not_an_error() -> None:
    _, decoder = decode("transformers-serve.chat.stream.http")
    assert decoder.warnings == ["stream ended without [DONE] after 5 events"]
    assert not decoder.saw_done


def test_transformers_sends_several_tokens_per_chunk_so_chunks_undercount_usage() -> None:
    # Byte-level tokens that do not form whole characters are held back and sent together: 3 text chunks, 8 tokens.
    chunks, _ = decode("transformers-serve.chat.stream.http")
    assert content_tokens(chunks) == 3
    assert the_usage(chunks).completion_tokens == 8


# -- every stream ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("llama-server.chat.stream.http", "chat"),
        ("llama-server.completions.stream.http", "completions"),
        ("llama-cpp-python.chat.stream.http", "chat"),
        ("transformers-serve.chat.stream.http", "chat"),
    ],
)
def test_decoding_is_the_same_fed_as_http_chunks_or_whole(name: str, mode: str) -> None:
    assert decode(name, mode)[0] == decode(name, mode, whole=True)[0]


# -- error bodies, non-streamed bodies, model lists ----------------------------------------------------------------


def test_llama_server_bad_request_body() -> None:
    capture = load_capture("llama-server.chat.badrequest.http")
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert error.message == "Expected 'messages' to be an array"
    assert error.type == "invalid_request_error"
    assert error.code == 400


def test_llama_cpp_python_validation_error_as_http_500_is_summarised_without_its_traceback() -> None:
    capture = load_capture("llama-cpp-python.chat.badrequest.http")
    assert capture.status == 500
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert error.message == "1 validation error: body.messages: Input should be a valid list"
    assert error.type == "internal_server_error"


def test_llama_server_non_streamed_body() -> None:
    response = decode_response_body(load_capture("llama-server.chat.nonstream.http").body)
    assert response.text == " model jo fic write finM dip faf"
    assert response.finish_reason == "length"
    assert response.usage == Usage(prompt_tokens=65, completion_tokens=8, total_tokens=73, cached_tokens=64)
    assert response.timings is not None and response.timings["predicted_n"] == 8


def test_llama_cpp_python_non_streamed_body() -> None:
    response = decode_response_body(load_capture("llama-cpp-python.chat.nonstream.http").body)
    assert response.text == " model jo fic write za dud numbergi"
    assert response.usage == Usage(prompt_tokens=64, completion_tokens=8, total_tokens=72)
    assert response.timings is None


@pytest.mark.parametrize("name", ["llama-server.models.http", "llama-cpp-python.models.http"])
def test_model_lists(name: str) -> None:
    assert parse_models(load_capture(name).body) == ["tiny"]
