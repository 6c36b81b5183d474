"""The OpenAI Responses dialect: requests, the typed event stream (lab captures and the API's documented events),
bodies and errors."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects.base import Chunk
from latscope.dialects.errors import decode_error_body
from latscope.dialects.responses import ResponsesStreamDecoder, decode_response_body, responses_request
from latscope.timeline.model import EventKind, Usage
from tests.support.httpfile import LAB, load_capture

R, C, RE, T, F, OT, E = (
    EventKind.ROLE,
    EventKind.CONTENT,
    EventKind.REASONING,
    EventKind.TOOL_CALL,
    EventKind.FINISH,
    EventKind.OTHER,
    EventKind.ERROR,
)


def decode(data: bytes | list[bytes]) -> tuple[list[Chunk], ResponsesStreamDecoder]:
    decoder = ResponsesStreamDecoder()
    chunks = [chunk for piece in ([data] if isinstance(data, bytes) else data) for chunk in decoder.feed(piece)]
    return chunks + decoder.close(), decoder


def event(obj: dict[str, object]) -> bytes:
    return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def test_request_sends_input_and_max_output_tokens() -> None:
    spec = responses_request("gpt", "Hi", 8, temperature=0.5)
    assert spec.path == "/responses" and spec.stream is True
    assert orjson.loads(spec.body) == {
        "model": "gpt",
        "input": "Hi",
        "max_output_tokens": 8,
        "stream": True,
        "temperature": 0.5,
    }


def test_request_sends_messages_as_input_items_and_refuses_token_ids() -> None:
    body = orjson.loads(responses_request("gpt", [{"role": "user", "content": "Hi"}], None).body)
    assert body["input"] == [{"role": "user", "content": "Hi"}] and "max_output_tokens" not in body
    with pytest.raises(ValueError):
        responses_request("gpt", [1, 2, 3], 4)


def test_lab_stream_kinds_and_usage() -> None:
    chunks, decoder = decode(load_capture("openai.responses.stream.http", LAB).chunks)
    kinds = [c.kind for c in chunks]
    assert kinds[0] is R and kinds.count(C) == 6 and kinds[-1] is F
    assert chunks[-1].usage == Usage(
        prompt_tokens=1, completion_tokens=6, total_tokens=7, cached_tokens=0, reasoning_tokens=0
    )
    assert chunks[-1].finish_reason == "max_output_tokens"
    assert decoder.warnings == []


def test_reasoning_and_function_call_deltas_are_their_own_kinds() -> None:
    stream = b"".join(
        event(obj)
        for obj in [
            {"type": "response.created", "sequence_number": 0, "response": {"id": "r", "status": "in_progress"}},
            {"type": "response.reasoning_summary_text.delta", "delta": "Think", "sequence_number": 1},
            {"type": "response.reasoning_text.delta", "delta": "ing", "sequence_number": 2},
            {"type": "response.output_text.delta", "delta": "Hi", "sequence_number": 3},
            {"type": "response.function_call_arguments.delta", "delta": "{\"a\":", "sequence_number": 4},
            {"type": "response.function_call_arguments.done", "arguments": "{\"a\":1}", "sequence_number": 5},
            {"type": "response.completed", "sequence_number": 6,
             "response": {"status": "completed", "usage": {"input_tokens": 5, "output_tokens": 4,
                                                          "output_tokens_details": {"reasoning_tokens": 2}}}},
        ]
    )  # fmt: skip
    chunks, decoder = decode(stream)
    assert [c.kind for c in chunks] == [R, RE, RE, C, T, OT, F]
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage is not None
    assert chunks[-1].usage.reasoning_tokens == 2
    assert decoder.warnings == []


def test_failed_response_and_error_events_are_errors() -> None:
    failed = {"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error",
                                                                                    "message": "boom"}}}  # fmt: skip
    chunks, _ = decode(event(failed))
    assert chunks[0].kind is E and chunks[0].error is not None and chunks[0].error.message == "boom"
    chunks, _ = decode(event({"type": "error", "code": "rate_limit", "message": "slow down", "param": None}))
    assert chunks[0].kind is E and chunks[0].error is not None and chunks[0].error.message == "slow down"


def test_stream_without_a_final_event_warns() -> None:
    _, decoder = decode(event({"type": "response.output_text.delta", "delta": "a"}))
    assert any("response.completed" in w for w in decoder.warnings)


def test_lab_body_and_error() -> None:
    decoded = decode_response_body(load_capture("openai.responses.nonstream.http", LAB).body)
    assert decoded.text and decoded.usage is not None and decoded.usage.completion_tokens == 4
    capture = load_capture("openai.responses.badrequest.http", LAB)
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert capture.status == 400 and error.param == "input"


def test_body_with_reasoning_and_a_refusal() -> None:
    body = orjson.dumps(
        {
            "object": "response",
            "status": "completed",
            "error": None,
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Considered"}]},
                {"type": "message", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 9},
        }
    )
    decoded = decode_response_body(body)
    assert (decoded.text, decoded.reasoning, decoded.finish_reason) == ("I can't help with that.", "Considered", "stop")
