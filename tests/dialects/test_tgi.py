"""The TGI native dialect: requests, the ``/generate_stream`` token stream (lab captures and TGI's documented
shapes), bodies and errors."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects import get_dialect
from latscope.dialects.base import Chunk
from latscope.dialects.errors import decode_error_body
from latscope.dialects.models import parse_models
from latscope.dialects.tgi import TgiStreamDecoder, decode_response_body, generate_request
from latscope.timeline.model import EventKind, Usage
from tests.support.httpfile import LAB, load_capture

C, E = EventKind.CONTENT, EventKind.ERROR


def decode(data: bytes | list[bytes]) -> tuple[list[Chunk], TgiStreamDecoder]:
    decoder = TgiStreamDecoder()
    chunks = [chunk for piece in ([data] if isinstance(data, bytes) else data) for chunk in decoder.feed(piece)]
    return chunks + decoder.close(), decoder


def test_request_puts_the_limit_in_parameters_and_asks_for_details() -> None:
    spec = generate_request("tgi", "Hello", 12, seed=7)
    assert spec.path == "/generate_stream" and spec.stream is True
    assert orjson.loads(spec.body) == {
        "inputs": "Hello",
        "parameters": {"details": True, "max_new_tokens": 12, "seed": 7},
    }
    assert generate_request("tgi", "Hello", 12, stream=False).path == "/generate"


def test_request_needs_prompt_text() -> None:
    with pytest.raises(ValueError):
        generate_request("tgi", [{"role": "user", "content": "x"}], 4)


def test_dialect_lives_at_the_root_and_lists_its_model_at_info() -> None:
    dialect = get_dialect("tgi.generate")
    assert (dialect.base_path, dialect.models_path) == ("", "/info")
    assert parse_models(b'{"model_id":"bigscience/bloom","max_total_tokens":2048}') == ["bigscience/bloom"]


def test_lab_stream_one_token_per_event_and_details_last() -> None:
    chunks, decoder = decode(load_capture("tgi.generate.stream.http", LAB).chunks)
    assert [c.kind for c in chunks] == [C] * 6
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage == Usage(prompt_tokens=1, completion_tokens=6, total_tokens=7)
    assert decoder.warnings == []


def test_special_token_counts_but_shows_no_text() -> None:
    stream = (
        b'data:{"index":1,"token":{"id":25,"text":" Deep","logprob":-0.31,"special":false},"generated_text":null,'
        b'"details":null}\n\n'
        b'data:{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":" Deep",'
        b'"details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null}}\n\n'
    )
    chunks, decoder = decode(stream)
    assert [(c.kind, c.text, c.tokens) for c in chunks] == [(C, " Deep", 1), (C, "", 1)]
    assert chunks[-1].finish_reason == "eos_token" and decoder.warnings == []


def test_error_in_the_stream_is_an_error_chunk() -> None:
    chunks, _ = decode(b'data:{"error":"Request failed during generation","error_type":"generation"}\n\n')
    assert chunks[0].kind is E and chunks[0].error is not None and chunks[0].error.type == "generation"


def test_stream_without_details_warns() -> None:
    _, decoder = decode(b'data:{"index":1,"token":{"id":1,"text":"a","special":false}}\n\n')
    assert any("details" in w for w in decoder.warnings)


def test_lab_body_and_validation_error() -> None:
    decoded = decode_response_body(load_capture("tgi.generate.nonstream.http", LAB).body)
    assert decoded.text and decoded.usage is not None and decoded.usage.completion_tokens == 4
    capture = load_capture("tgi.generate.badrequest.http", LAB)
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert capture.status == 422 and error.type == "validation"
