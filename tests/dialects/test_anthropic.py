"""The Anthropic Messages dialect: requests, the typed event stream (lab captures and the API's documented
examples), bodies and errors."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects import get_dialect
from latscope.dialects.anthropic import (
    API_VERSION,
    DEFAULT_MAX_TOKENS,
    AnthropicStreamDecoder,
    decode_response_body,
    messages_request,
)
from latscope.dialects.base import Chunk, EventDecodeError
from latscope.dialects.errors import decode_error_body
from latscope.timeline.model import EventKind, Usage
from tests.support.httpfile import LAB, load_capture

R, C, RE, T, F, D, OT, E = (
    EventKind.ROLE,
    EventKind.CONTENT,
    EventKind.REASONING,
    EventKind.TOOL_CALL,
    EventKind.FINISH,
    EventKind.DONE,
    EventKind.OTHER,
    EventKind.ERROR,
)


def decode(data: bytes | list[bytes]) -> tuple[list[Chunk], AnthropicStreamDecoder]:
    decoder = AnthropicStreamDecoder()
    chunks = [chunk for piece in ([data] if isinstance(data, bytes) else data) for chunk in decoder.feed(piece)]
    return chunks + decoder.close(), decoder


def event(obj: dict[str, object]) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


# -- requests -------------------------------------------------------------------------------------------------------


def test_request_goes_to_messages_with_the_version_header() -> None:
    spec = messages_request("claude", "Hi", 16)
    assert spec.path == "/messages" and spec.dialect == "anthropic.messages" and spec.stream is True
    assert ("anthropic-version", API_VERSION) in spec.headers
    assert orjson.loads(spec.body) == {
        "model": "claude",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
    }


def test_request_moves_system_messages_to_the_system_field() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    body = orjson.loads(messages_request("claude", messages, None).body)
    assert body["system"] == "Be brief." and body["messages"] == [{"role": "user", "content": "Hi"}]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS  # the API requires a limit


def test_request_refuses_ignore_eos() -> None:
    with pytest.raises(ValueError, match="ignore_eos"):
        messages_request("claude", "Hi", 4, ignore_eos=True)


def test_the_key_goes_in_x_api_key_not_authorization() -> None:
    assert get_dialect("anthropic.messages").credential_headers("sk-ant-1") == [("x-api-key", "sk-ant-1")]


# -- streams --------------------------------------------------------------------------------------------------------


def test_lab_stream_kinds_text_and_usage() -> None:
    capture = load_capture("anthropic.messages.stream.http", LAB)
    chunks, decoder = decode(capture.chunks)
    assert [c.kind for c in chunks] == [R, OT, OT, *[C] * 6, OT, F, D]
    assert sum(c.tokens for c in chunks) == 6
    finish = chunks[-2]
    assert finish.finish_reason == "max_tokens"
    assert finish.usage == Usage(prompt_tokens=8, completion_tokens=6, total_tokens=14)
    assert finish.extra is not None and "queue_ms" in finish.extra["latscope"]
    assert decoder.warnings == []


def test_lab_tool_stream_is_tool_call_tokens_whose_pieces_make_json() -> None:
    chunks, _ = decode(load_capture("anthropic.messages.tool.stream.http", LAB).body)
    calls = [c for c in chunks if c.kind is T]
    assert len(calls) == 4 and not any(c.kind is C for c in chunks)
    assert isinstance(orjson.loads("".join(c.text for c in calls)), dict)


def test_lab_thinking_stream_is_reasoning_then_text() -> None:
    chunks, decoder = decode(load_capture("anthropic.messages.thinking.stream.http", LAB).chunks)
    assert [c.kind for c in chunks if c.tokens] == [RE] * 3 + [C] * 3
    assert decoder.warnings == []


def test_documented_thinking_and_tool_use_stream() -> None:
    # The shapes of Anthropic's "Streaming Messages" documentation: thinking, then text, then a tool call.
    stream = b"".join(
        event(obj)
        for obj in [
            {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": [],
                                                  "usage": {"input_tokens": 472, "output_tokens": 3,
                                                            "cache_read_input_tokens": 100}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQ"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Okay"}},
            {"type": "content_block_stop", "index": 1},
            {"type": "content_block_start", "index": 2,
             "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
            {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
            {"type": "content_block_delta", "index": 2,
             "delta": {"type": "input_json_delta", "partial_json": "{\"location\":"}},
            {"type": "content_block_delta", "index": 2,
             "delta": {"type": "input_json_delta", "partial_json": " \"Paris\"}"}},
            {"type": "content_block_stop", "index": 2},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
             "usage": {"output_tokens": 89}},
            {"type": "message_stop"},
        ]
    )  # fmt: skip
    chunks, decoder = decode(stream)
    assert [c.kind for c in chunks] == [R, OT, RE, OT, OT, OT, C, OT, OT, OT, T, T, OT, F, D]
    assert chunks[13].usage == Usage(prompt_tokens=572, completion_tokens=89, total_tokens=661, cached_tokens=100)
    assert chunks[13].finish_reason == "tool_use"
    assert decoder.warnings == []


def test_error_event_is_an_error_chunk() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    chunks, _ = decode(event(error))
    assert chunks[0].kind is E and chunks[0].error is not None
    assert (chunks[0].error.type, chunks[0].error.message) == ("overloaded_error", "Overloaded")


def test_plain_text_error_event_is_still_an_error() -> None:
    chunks, _ = decode(b"event: error\ndata: upstream overloaded\n\n")
    assert chunks[0].kind is E and chunks[0].error is not None and "overloaded" in chunks[0].error.message


def test_stream_without_message_stop_warns() -> None:
    _, decoder = decode(event({"type": "ping"}))
    assert any("message_stop" in w for w in decoder.warnings)


def test_unknown_event_type_is_other_with_one_warning() -> None:
    chunks, decoder = decode(event({"type": "novel"}) + event({"type": "novel2"}) + event({"type": "message_stop"}))
    assert [c.kind for c in chunks] == [OT, OT, D]
    assert len([w for w in decoder.warnings if "unrecognised" in w]) == 1


def test_invalid_json_names_the_event_and_keeps_the_chunks_before_it() -> None:
    good = event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}})
    with pytest.raises(EventDecodeError, match="SSE event 2") as raised:
        AnthropicStreamDecoder().feed(good + b"event: content_block_delta\ndata: {oops\n\n")
    assert [c.kind for c in raised.value.chunks] == [C]


# -- bodies and errors ----------------------------------------------------------------------------------------------


def test_lab_body_decodes() -> None:
    decoded = decode_response_body(load_capture("anthropic.messages.nonstream.http", LAB).body)
    assert decoded.text and decoded.finish_reason == "max_tokens"
    assert decoded.usage is not None and decoded.usage.completion_tokens == 4


def test_body_with_thinking_keeps_it_as_reasoning() -> None:
    body = orjson.dumps(
        {
            "type": "message",
            "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hi"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 2},
        }
    )
    decoded = decode_response_body(body)
    assert (decoded.text, decoded.reasoning) == ("Hi", "hmm")


def test_lab_error_body_has_anthropics_shape() -> None:
    capture = load_capture("anthropic.messages.badrequest.http", LAB)
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert capture.status == 400 and error.type == "invalid_request_error" and "max_tokens" in error.message


def test_token_events_decoded_by_the_template_equal_parsed_ones() -> None:
    def delta(index: int, text: str) -> bytes:
        return event({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})

    texts = [f" w{i}" for i in range(40)] + ['say "hi"', "back\\slash", " tab\tbed"]
    stream = b"".join(delta(0, text) for text in texts) + delta(1, " other block") + delta(0, " again")
    one_read, decoder = decode(stream)
    per_event, _ = decode([delta(0, text) for text in texts] + [delta(1, " other block"), delta(0, " again")])
    expected = [*texts, " other block", " again"]
    assert [c.text for c in one_read] == [c.text for c in per_event] == expected
    assert {c.kind for c in one_read} == {C} and all(c.tokens == 1 for c in one_read)
    assert decoder._templated > 30  # most of them without parsing JSON
