"""Non-streamed response bodies of the OpenAI dialect (the real captures are in test_openai_captures)."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects.base import ApiError, StreamDecodeError
from latscope.dialects.openai import decode_response_body
from latscope.timeline.model import Usage


def test_response_body_with_reasoning() -> None:
    body = orjson.dumps(
        {
            "choices": [
                {"message": {"role": "assistant", "content": "4", "reasoning_content": "2+2"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    )
    response = decode_response_body(body)
    assert (response.text, response.reasoning, response.finish_reason) == ("4", "2+2", "stop")
    assert response.usage == Usage(5, 3, 8)


def test_completions_response_body() -> None:
    body = b'{"object":"text_completion","choices":[{"text":" end","finish_reason":"length"}]}'
    response = decode_response_body(body, "completions")
    assert (response.text, response.finish_reason) == (" end", "length")


def test_response_body_with_null_content_has_empty_text() -> None:
    body = b'{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"tool_calls"}]}'
    assert decode_response_body(body).text == ""


def test_response_body_that_is_an_error_object_returns_the_error() -> None:
    response = decode_response_body(b'{"error":{"message":"nope","type":"x"}}')
    assert response.error == ApiError(message="nope", type="x")


def test_response_body_that_is_not_json_raises() -> None:
    with pytest.raises(StreamDecodeError, match="not valid JSON"):
        decode_response_body(b"data: {}\n\n")
