"""The dialect registry."""

from __future__ import annotations

import pytest

from latscope.dialects import DIALECTS, Dialect, get_dialect, register_dialect
from latscope.dialects.openai import OpenAIStreamDecoder, decode_error_body


def test_openai_dialects_are_registered() -> None:
    assert {"openai.chat", "openai.completions"} <= set(DIALECTS)


@pytest.mark.parametrize(
    ("name", "path"), [("openai.chat", "/chat/completions"), ("openai.completions", "/completions")]
)
def test_a_dialect_builds_requests_for_its_endpoint(name: str, path: str) -> None:
    spec = get_dialect(name).build_request("m", "hello", 8)
    assert (spec.path, spec.dialect) == (path, name)


@pytest.mark.parametrize(("name", "mode"), [("openai.chat", "chat"), ("openai.completions", "completions")])
def test_a_dialect_makes_a_fresh_decoder_in_its_mode(name: str, mode: str) -> None:
    dialect = get_dialect(name)
    first, second = dialect.new_decoder(), dialect.new_decoder()
    assert isinstance(first, OpenAIStreamDecoder) and first.mode == mode
    assert first is not second


def test_a_dialect_decodes_non_streamed_bodies_in_its_mode() -> None:
    body = b'{"choices":[{"text":" t","finish_reason":"stop"}]}'
    assert get_dialect("openai.completions").decode_response(body).text == " t"


def test_unknown_dialect_error_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match=r"openai\.chat"):
        get_dialect("klingon")


def test_register_dialect_adds_one() -> None:
    chat = get_dialect("openai.chat")
    custom = Dialect("test.custom", chat.build_request, chat.new_decoder, chat.decode_response, decode_error_body)
    register_dialect(custom)
    try:
        assert get_dialect("test.custom") is custom
    finally:
        del DIALECTS["test.custom"]
