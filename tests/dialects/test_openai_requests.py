"""Request builders and the /models parser of the OpenAI dialect."""

from __future__ import annotations

from typing import Any

import orjson

from latscope.dialects.openai import chat_request, completions_request


def body(spec_body: bytes) -> dict[str, Any]:
    parsed = orjson.loads(spec_body)
    assert isinstance(parsed, dict)
    return parsed


def test_chat_request_streams_and_asks_for_usage_by_default() -> None:
    spec = chat_request("m", [{"role": "user", "content": "hi"}], 16)
    assert (spec.method, spec.path, spec.dialect, spec.model) == ("POST", "/chat/completions", "openai.chat", "m")
    assert spec.headers == [("content-type", "application/json")]
    assert body(spec.body) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_chat_request_sends_prompt_text_as_one_user_message() -> None:
    spec = chat_request("m", "hello there", 4)
    assert body(spec.body)["messages"] == [{"role": "user", "content": "hello there"}]


def test_chat_request_without_stream_has_no_stream_options() -> None:
    parsed = body(chat_request("m", "x", 4, stream=False).body)
    assert parsed == {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "stream": False}


def test_chat_request_without_include_usage_has_no_stream_options() -> None:
    assert "stream_options" not in body(chat_request("m", "x", 4, include_usage=False).body)


def test_chat_request_without_max_tokens_leaves_the_limit_to_the_server() -> None:
    assert "max_tokens" not in body(chat_request("m", "x", None).body)


def test_chat_request_sends_sampling_options_only_when_set() -> None:
    parsed = body(chat_request("m", "x", 4, temperature=0.0, seed=7, ignore_eos=True).body)
    assert parsed == {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "seed": 7,
        "ignore_eos": True,
    }


def test_chat_request_merges_extra_fields_at_the_top_level_last() -> None:
    parsed = body(chat_request("m", "x", 4, extra={"user": "pad-pad-pad", "max_tokens": 9}).body)
    assert parsed["user"] == "pad-pad-pad"
    assert parsed["max_tokens"] == 9


def test_completions_request_sends_the_prompt_as_is() -> None:
    spec = completions_request("m", "Once upon", 8, temperature=1.0)
    assert (spec.path, spec.dialect) == ("/completions", "openai.completions")
    assert body(spec.body) == {
        "model": "m",
        "prompt": "Once upon",
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 1.0,
    }


def test_completions_request_accepts_token_ids() -> None:
    assert body(completions_request("m", (1, 2, 3), 8).body)["prompt"] == [1, 2, 3]
