"""The gateway stage on its own: parsing, validation, token counting, auth — bytes in, request or error out."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from latscope.lab import tokenizer
from latscope.lab.errors import ErrorResponse
from latscope.lab.gateway import DEFAULT_MAX_TOKENS_CHAT, DEFAULT_MAX_TOKENS_COMPLETIONS, Endpoint, Gateway

MODEL = "lab-model"


def gateway(*, slow: bool = False, api_key: str | None = None, context: int = 131_072) -> Gateway:
    return Gateway(model=MODEL, api_key=api_key, slow_parse=slow, max_context_tokens=context)


def chat(**fields: Any) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Hello, world!"}]}
    body.update(fields)
    return orjson.dumps({k: v for k, v in body.items() if v is not ...})


def rejected(body: bytes, endpoint: Endpoint = Endpoint.CHAT, *, slow: bool = False) -> ErrorResponse:
    with pytest.raises(ErrorResponse) as info:
        gateway(slow=slow).parse(endpoint, body)
    return info.value


@pytest.mark.parametrize("slow", [False, True])
def test_a_valid_chat_request_is_accepted_with_its_prompt_tokens(slow: bool) -> None:
    parsed = gateway(slow=slow).parse(
        Endpoint.CHAT, chat(max_tokens=7, stream=True, stream_options={"include_usage": True}, seed=3)
    )
    assert parsed.prompt_tokens == tokenizer.count_message_tokens([{"role": "user", "content": "Hello, world!"}])
    assert (parsed.max_tokens, parsed.stream, parsed.include_usage, parsed.seed) == (7, True, True, 3)
    assert parsed.parse_ns >= 0 and parsed.validate_ns >= 0


def test_defaults_when_optional_fields_are_absent() -> None:
    parsed = gateway().parse(Endpoint.CHAT, chat())
    assert parsed.max_tokens == DEFAULT_MAX_TOKENS_CHAT and not parsed.stream and not parsed.include_usage
    completion = gateway().parse(Endpoint.COMPLETIONS, orjson.dumps({"model": MODEL, "prompt": "Once"}))
    assert completion.max_tokens == DEFAULT_MAX_TOKENS_COMPLETIONS


def test_max_completion_tokens_is_honoured() -> None:
    assert gateway().parse(Endpoint.CHAT, chat(max_completion_tokens=9)).max_tokens == 9


def test_the_user_field_is_accepted_at_any_length_and_not_tokenised() -> None:
    small = gateway().parse(Endpoint.CHAT, chat(user="u"))
    large = gateway().parse(Endpoint.CHAT, chat(user="word " * 200_000))
    assert large.prompt_tokens == small.prompt_tokens
    assert large.body_bytes > 1_000_000


def test_completions_count_text_and_token_id_prompts() -> None:
    text = gateway().parse(Endpoint.COMPLETIONS, orjson.dumps({"model": MODEL, "prompt": "a b c d"}))
    ids = gateway().parse(Endpoint.COMPLETIONS, orjson.dumps({"model": MODEL, "prompt": [1, 2, 3, 4, 5]}))
    batch_of_one = gateway().parse(Endpoint.COMPLETIONS, orjson.dumps({"model": MODEL, "prompt": ["a b c d"]}))
    assert text.prompt_tokens == 4 and ids.prompt_tokens == 5 and batch_of_one.prompt_tokens == 4


@pytest.mark.parametrize("slow", [False, True])
def test_malformed_json_is_a_400(slow: bool) -> None:
    error = rejected(b'{"model": "lab-model", "messages": [', slow=slow)
    assert error.status == 400 and error.type == "invalid_request_error"
    assert "parse the JSON body" in error.message


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (chat(messages="hello"), "messages", "invalid_type"),
        (chat(messages=[]), "messages", "empty_array"),
        (chat(messages=["hello"]), "messages[0]", "invalid_type"),
        (chat(messages=[{"role": "wizard", "content": "hi"}]), "messages[0].role", "invalid_value"),
        (chat(messages=[{"content": "hi"}]), "messages[0].role", "missing_required_parameter"),
        (chat(messages=[{"role": "user", "content": 5}]), "messages[0].content", "invalid_type"),
        (chat(messages=[{"role": "user"}]), "messages[0].content", "missing_required_parameter"),
        (chat(max_tokens="10"), "max_tokens", "invalid_type"),
        (chat(max_tokens=True), "max_tokens", "invalid_type"),
        (chat(max_tokens=0), "max_tokens", "integer_below_min_value"),
        (chat(stream="yes"), "stream", "invalid_type"),
        (chat(stream_options=[]), "stream_options", "invalid_type"),
        (chat(temperature="hot"), "temperature", "invalid_type"),
        (chat(seed=1.5), "seed", "invalid_type"),
        (chat(user=42), "user", "invalid_type"),
        (chat(n=2), "n", "invalid_value"),
        (chat(model=7), "model", "invalid_type"),
        (chat(messages=...), "messages", "missing_required_parameter"),
        (chat(model=...), "model", "missing_required_parameter"),
        (chat(max_tokens=200_000), "messages", "context_length_exceeded"),
    ],
)
def test_invalid_fields_get_openai_style_400s(body: bytes, param: str, code: str) -> None:
    error = rejected(body)
    assert (error.status, error.param, error.code) == (400, param, code)
    payload = orjson.loads(error.body())["error"]
    assert set(payload) == {"message", "type", "param", "code"}
    assert payload["type"] == "invalid_request_error"


def test_missing_prompt_is_a_400() -> None:
    error = rejected(orjson.dumps({"model": MODEL}), Endpoint.COMPLETIONS)
    assert (error.status, error.param, error.code) == (400, "prompt", "missing_required_parameter")


def test_a_body_that_is_not_an_object_is_a_400() -> None:
    assert rejected(b"[1, 2]").status == 400


def test_unknown_model_is_a_404_model_not_found() -> None:
    error = rejected(chat(model="gpt-9"))
    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
    assert "gpt-9" in error.message


def test_api_key_checks() -> None:
    guarded = gateway(api_key="k1")
    guarded.authorize(b"Bearer k1")
    for header, code in ((None, None), (b"Basic abc", None), (b"Bearer k2", "invalid_api_key")):
        with pytest.raises(ErrorResponse) as info:
            guarded.authorize(header)
        assert info.value.status == 401 and info.value.code == code
    gateway().authorize(None)  # no key configured: open


def test_slow_parse_costs_grow_with_body_size_far_faster_than_the_tuned_parser() -> None:
    small = chat(user="x" * 1_000)
    large = chat(user="x" * 1_000_000)

    def server_ns(g: Gateway, body: bytes) -> int:
        best = None
        for _ in range(3):  # the best of three: scheduling noise only ever adds time
            started = time.monotonic_ns()
            g.parse(Endpoint.CHAT, body)
            elapsed = time.monotonic_ns() - started
            best = elapsed if best is None else min(best, elapsed)
        assert best is not None
        return best

    tuned_growth = server_ns(gateway(), large) - server_ns(gateway(), small)
    naive_growth = server_ns(gateway(slow=True), large) - server_ns(gateway(slow=True), small)
    assert naive_growth > 10 * max(tuned_growth, 100_000)
    # And it is what Server-Timing reports: the measured phases account for the growth.
    parsed = gateway(slow=True).parse(Endpoint.CHAT, large)
    assert parsed.parse_ns + parsed.validate_ns > naive_growth / 2


def test_slow_parse_refuses_control_characters_like_a_naive_gateway() -> None:
    assert rejected(b'{"model": "lab-model",\x01 "messages": []}', slow=True).status == 400
