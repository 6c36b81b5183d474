"""Model lists: OpenAI's /models and Ollama's /api/tags."""

from __future__ import annotations

import pytest

from latscope.dialects.base import StreamDecodeError
from latscope.dialects.models import parse_models


def test_parse_models_reads_openai_ids_in_order() -> None:
    assert parse_models(b'{"object":"list","data":[{"id":"b"},{"id":"a"}]}') == ["b", "a"]


def test_parse_models_reads_an_ollama_style_list() -> None:
    assert parse_models(b'{"models":[{"name":"llama3:8b","model":"llama3:8b"},{"name":"qwen"}]}') == [
        "llama3:8b",
        "qwen",
    ]


def test_parse_models_lists_a_model_in_both_lists_once() -> None:
    assert parse_models(b'{"models":[{"model":"t"}],"data":[{"id":"t"},{"id":"u"}]}') == ["t", "u"]


def test_parse_models_rejects_a_body_that_is_not_json() -> None:
    with pytest.raises(StreamDecodeError, match="not JSON"):
        parse_models(b"<html>nope</html>")
