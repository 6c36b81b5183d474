"""Ollama's native dialect: request builders and the incremental NDJSON decoder, on byte fixtures."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.dialects.base import ApiError, Chunk, StreamDecodeError
from latscope.dialects.ollama import (
    CHAT_PATH,
    GENERATE_PATH,
    OLLAMA_CHAT,
    OLLAMA_GENERATE,
    OllamaStreamDecoder,
    chat_request,
    decode_response_body,
    generate_request,
)
from latscope.signals.join import apply_server_signals
from latscope.timeline.model import EventKind, Timeline, Usage

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ollama"
CHAT = (FIXTURES / "chat.stream.ndjson").read_bytes()
GENERATE = (FIXTURES / "generate.stream.ndjson").read_bytes()

CHAT_FINAL_EXTRA = {
    "total_duration": 4883583458,
    "load_duration": 1334875,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 342546000,
    "eval_count": 4,
    "eval_duration": 4535599000,
}


def _decode(data: bytes, splits: list[int] | None = None) -> tuple[list[Chunk], list[str]]:
    decoder = OllamaStreamDecoder()
    chunks: list[Chunk] = []
    start = 0
    for end in [*(splits or []), len(data)]:
        chunks += decoder.feed(data[start:end])
        start = end
    chunks += decoder.close()
    return chunks, decoder.warnings


def test_chat_request_is_a_streaming_post_to_api_chat_with_num_predict() -> None:
    spec = chat_request("llama3.2", [{"role": "user", "content": "Why is the sky blue?"}], 64)
    assert (spec.method, spec.path, spec.dialect, spec.model) == ("POST", CHAT_PATH, OLLAMA_CHAT, "llama3.2")
    assert spec.stream is True
    assert orjson.loads(spec.body) == {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "stream": True,
        "options": {"num_predict": 64},
    }
    assert ("content-type", "application/json") in spec.headers
    assert ("accept", "application/x-ndjson") in spec.headers


def test_chat_request_sends_a_prompt_text_as_one_user_message() -> None:
    assert orjson.loads(chat_request("m", "Hi", None).body)["messages"] == [{"role": "user", "content": "Hi"}]


def test_generate_request_puts_temperature_seed_and_limit_in_options_and_merges_extra() -> None:
    spec = generate_request(
        "qwen3", "Hi", 8, temperature=0.0, seed=7, extra={"keep_alive": "5m", "options": {"top_k": 20}}
    )
    assert (spec.path, spec.dialect) == (GENERATE_PATH, OLLAMA_GENERATE)
    assert orjson.loads(spec.body) == {
        "model": "qwen3",
        "prompt": "Hi",
        "stream": True,
        "options": {"temperature": 0.0, "seed": 7, "num_predict": 8, "top_k": 20},
        "keep_alive": "5m",
    }


def test_a_non_streamed_request_says_so() -> None:
    spec = generate_request("m", "p", 4, stream=False)
    assert spec.stream is False and orjson.loads(spec.body)["stream"] is False


def test_request_without_limit_has_no_options() -> None:
    assert "options" not in orjson.loads(generate_request("m", "p", None).body)


def test_chat_stream_tokens_then_finish_with_usage_and_nanosecond_durations() -> None:
    chunks, warnings = _decode(CHAT)
    assert warnings == []
    assert [(c.kind, c.text, c.tokens) for c in chunks] == [
        (EventKind.CONTENT, "The", 1),
        (EventKind.CONTENT, " sky", 1),
        (EventKind.CONTENT, " is", 1),
        (EventKind.CONTENT, " blue — café", 1),
        (EventKind.FINISH, "", 0),
    ]
    final = chunks[-1]
    assert final.finish_reason == "length"
    assert final.usage == Usage(prompt_tokens=26, completion_tokens=4, total_tokens=30)
    assert final.extra == CHAT_FINAL_EXTRA


def test_generate_stream_with_thinking_tokens() -> None:
    chunks, warnings = _decode(GENERATE)
    assert warnings == []
    assert [(c.kind, c.text) for c in chunks] == [
        (EventKind.REASONING, "Let"),
        (EventKind.REASONING, " me"),
        (EventKind.CONTENT, "Hi"),
        (EventKind.FINISH, ""),
    ]
    assert chunks[-1].finish_reason == "stop"
    assert chunks[-1].usage == Usage(9, 3, 12)
    assert chunks[-1].extra is not None and "context" not in chunks[-1].extra


@given(st.lists(st.integers(min_value=0, max_value=len(CHAT)), max_size=12))
def test_any_split_of_the_stream_gives_the_same_chunks(cuts: list[int]) -> None:
    assert _decode(CHAT, sorted(cuts)) == _decode(CHAT)


def test_byte_by_byte_feeding_splits_utf8_sequences() -> None:
    assert _decode(CHAT, list(range(1, len(CHAT)))) == _decode(CHAT)


def test_error_line_becomes_an_error_chunk() -> None:
    chunks, warnings = _decode((FIXTURES / "chat.error.ndjson").read_bytes())
    assert chunks == [Chunk(EventKind.ERROR, error=ApiError('model "nope" not found, try pulling it first'))]
    assert warnings == ['the stream ended without a "done": true message']


def test_crlf_blank_lines_and_a_last_line_without_newline() -> None:
    data = CHAT.replace(b"\n", b"\r\n\r\n").rstrip(b"\r\n")
    assert _decode(data) == _decode(CHAT)


def test_stream_cut_before_the_final_message_warns() -> None:
    chunks, warnings = _decode(CHAT.split(b"\n", 2)[0] + b"\n")
    assert [c.text for c in chunks] == ["The"]
    assert warnings == ['the stream ended without a "done": true message']


def test_data_after_the_final_message_warns() -> None:
    _, warnings = _decode(CHAT + CHAT.split(b"\n", 1)[0] + b"\n")
    assert warnings == ['line 6 arrived after the final "done": true message']


def test_invalid_json_raises_a_decode_error_naming_line_and_offset() -> None:
    decoder = OllamaStreamDecoder()
    first_line = CHAT.split(b"\n", 1)[0] + b"\n"
    decoder.feed(first_line)
    with pytest.raises(StreamDecodeError, match=rf"line 2 \(byte {len(first_line)}\)"):
        decoder.feed(b'{"model":\n')


def test_a_json_value_that_is_not_an_object_raises() -> None:
    with pytest.raises(StreamDecodeError, match="not a JSON object"):
        OllamaStreamDecoder().feed(b"[1, 2]\n")


def test_invalid_utf8_is_replaced_with_a_warning() -> None:
    chunks, warnings = _decode(b'{"response":"caf\xe9","done":false}\n')
    assert chunks[0].text == "caf\ufffd"
    assert warnings[0].startswith("invalid UTF-8 on line 1")


def test_unreadable_counts_are_ignored_with_a_warning() -> None:
    chunks, warnings = _decode(b'{"response":"","done":true,"prompt_eval_count":"26","eval_count":3}\n')
    assert chunks[0].usage == Usage(prompt_tokens=None, completion_tokens=3, total_tokens=None)
    assert warnings == ["ollama: prompt_eval_count='26' is not a non-negative integer; ignored"]


def test_role_only_message_is_a_role_chunk() -> None:
    chunks, _ = _decode(b'{"message":{"role":"assistant","content":""},"done":false}\n{"done":false}\n')
    assert [c.kind for c in chunks] == [EventKind.ROLE, EventKind.OTHER]


def test_a_tool_call_message_is_a_tool_call_chunk_with_its_arguments_as_json() -> None:
    # Ollama's documented chat stream with tools: the call arrives whole, its arguments an object, content empty
    line = (
        b'{"model":"llama3.2","created_at":"2024-07-22T20:33:28.123648Z","message":{"role":"assistant",'
        b'"content":"","tool_calls":[{"function":{"name":"get_current_weather","arguments":'
        b'{"format":"celsius","location":"Paris, FR"}}}]},"done":false}\n'
    )
    chunks, warnings = _decode(line + b'{"message":{"role":"assistant","content":""},"done":true}\n')
    assert [c.kind for c in chunks] == [EventKind.TOOL_CALL, EventKind.FINISH] and not warnings
    assert orjson.loads(chunks[0].text) == {"format": "celsius", "location": "Paris, FR"}
    assert chunks[0].tokens == 1
    # a call without arguments still counts as a call; text beside a call is content
    bare, _ = _decode(b'{"message":{"content":"","tool_calls":[{"function":{"name":"now"}}]},"done":false}\n')
    assert [(c.kind, c.text) for c in bare] == [(EventKind.TOOL_CALL, "")]
    mixed, _ = _decode(b'{"message":{"content":"Hi","tool_calls":[{"function":{"name":"now"}}]},"done":false}\n')
    assert [c.kind for c in mixed] == [EventKind.CONTENT]


def test_final_chunk_extra_joins_onto_the_timeline() -> None:
    chunks, _ = _decode(CHAT)
    timeline = Timeline()
    apply_server_signals(timeline, headers={}, extra=chunks[-1].extra)
    assert timeline.server_ms("prefill") == 342.546
    assert timeline.server_ms("slot_wait_templating") == pytest.approx(4.103583)


def test_non_streamed_response_and_error_body() -> None:
    body = (
        b'{"model":"llama3.2","created_at":"2025-01-15T10:00:00Z","message":{"role":"assistant","content":"Blue.",'
        b'"thinking":"Rayleigh"},"done_reason":"stop","done":true,"prompt_eval_count":5,"eval_count":2}'
    )
    decoded = decode_response_body(body)
    assert (decoded.text, decoded.reasoning, decoded.finish_reason) == ("Blue.", "Rayleigh", "stop")
    assert decoded.usage == Usage(5, 2, 7)
    error = decode_response_body(b'{"error":"model \\"x\\" not found"}')
    assert error.error == ApiError('model "x" not found') and error.text == ""
    with pytest.raises(StreamDecodeError):
        decode_response_body(b"<html>")
