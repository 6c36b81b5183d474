"""The dialect registry: the one door through which every command chooses a wire format."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from latscope.dialects import DEFAULT_DIALECT, DIALECTS, Framing, get_dialect, register_dialect
from latscope.dialects.errors import decode_error_body
from latscope.dialects.ollama import OllamaStreamDecoder
from latscope.dialects.openai import OpenAIStreamDecoder


def test_the_openai_and_ollama_dialects_are_registered() -> None:
    assert {"openai.chat", "openai.completions", "ollama.chat", "ollama.generate"} <= set(DIALECTS)
    assert DEFAULT_DIALECT == "openai.chat"


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("openai.chat", "/chat/completions"),
        ("openai.completions", "/completions"),
        ("ollama.chat", "/api/chat"),
        ("ollama.generate", "/api/generate"),
    ],
)
def test_a_dialect_builds_streamed_requests_for_its_endpoint(name: str, path: str) -> None:
    spec = get_dialect(name).build_request("m", "hello", 8)
    assert (spec.path, spec.dialect, spec.model, spec.stream) == (path, name, "m", True)
    assert orjson.loads(spec.body)["stream"] is True


@pytest.mark.parametrize("name", ["openai.chat", "ollama.chat"])
def test_a_builder_says_when_the_response_is_not_streamed(name: str) -> None:
    assert get_dialect(name).build_request("m", "hello", 8, stream=False).stream is False


def test_padding_through_extra_keeps_the_stream_flag_the_body_has() -> None:
    spec = get_dialect("openai.chat").build_request("m", "hello", 1, extra={"user": "x" * 10, "stream": False})
    assert spec.stream is False and orjson.loads(spec.body)["stream"] is False


@pytest.mark.parametrize(
    ("name", "decoder", "framing", "media_type"),
    [
        ("openai.chat", OpenAIStreamDecoder, Framing.SSE, "text/event-stream"),
        ("openai.completions", OpenAIStreamDecoder, Framing.SSE, "text/event-stream"),
        ("ollama.chat", OllamaStreamDecoder, Framing.NDJSON, "application/x-ndjson"),
        ("ollama.generate", OllamaStreamDecoder, Framing.NDJSON, "application/x-ndjson"),
    ],
)
def test_a_dialect_names_its_framing_media_type_and_a_fresh_decoder(
    name: str, decoder: type, framing: Framing, media_type: str
) -> None:
    dialect = get_dialect(name)
    first, second = dialect.new_decoder(), dialect.new_decoder()
    assert isinstance(first, decoder) and first is not second
    assert dialect.framing is framing
    assert dialect.stream_media_types[0] == media_type and dialect.accepts_stream_type(media_type)
    assert not dialect.accepts_stream_type("application/json")


@pytest.mark.parametrize(("name", "mode"), [("openai.chat", "chat"), ("openai.completions", "completions")])
def test_an_openai_dialect_decodes_in_its_mode(name: str, mode: str) -> None:
    decoder = get_dialect(name).new_decoder()
    assert isinstance(decoder, OpenAIStreamDecoder) and decoder.mode == mode
    assert get_dialect(name).mode == mode


def test_a_dialect_decodes_non_streamed_bodies_in_its_mode() -> None:
    body = b'{"choices":[{"text":" t","finish_reason":"stop"}]}'
    assert get_dialect("openai.completions").decode_response(body).text == " t"


def test_every_dialect_decodes_errors_with_the_shared_decoder() -> None:
    assert all(dialect.decode_error is decode_error_body for dialect in DIALECTS.values())


@pytest.mark.parametrize(
    ("name", "base_path", "models_path"),
    [("openai.chat", "/v1", "/models"), ("ollama.chat", "", "/api/tags")],
)
def test_a_dialect_knows_where_its_api_and_its_model_list_live(name: str, base_path: str, models_path: str) -> None:
    dialect = get_dialect(name)
    assert (dialect.base_path, dialect.models_path) == (base_path, models_path)
    assert dialect.parse_models(b'{"models":[{"name":"llama3.2"}]}') == ["llama3.2"]


def test_a_builder_refuses_a_prompt_form_its_api_cannot_send() -> None:
    with pytest.raises(ValueError, match="needs 'prompt'"):
        get_dialect("ollama.generate").build_request("m", [{"role": "user", "content": "hi"}], 8)
    with pytest.raises(ValueError, match="not token ids"):
        get_dialect("openai.chat").build_request("m", [1, 2, 3], 8)


def test_ollama_refuses_ignore_eos_rather_than_ignoring_it() -> None:
    with pytest.raises(ValueError, match="ignore_eos"):
        get_dialect("ollama.chat").build_request("m", "hi", 8, ignore_eos=True)


def test_unknown_dialect_error_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"openai\.chat.*ollama\.chat"):
        get_dialect("klingon")


def test_register_dialect_adds_one() -> None:
    custom = dataclasses.replace(get_dialect("openai.chat"), name="test.custom")
    register_dialect(custom)
    try:
        assert get_dialect("test.custom") is custom
    finally:
        del DIALECTS["test.custom"]
