"""Error bodies, whichever dialect's request they answer (real servers' captures are in test_openai_captures)."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from latscope.dialects.base import ApiError
from latscope.dialects.errors import ERROR_TEXT_CHARS, api_error_from, decode_error_body

JSON = "application/json"


def test_openai_error_object() -> None:
    body = orjson.dumps(
        {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded", "param": None}}
    )
    assert decode_error_body(429, body, JSON) == ApiError(
        message="Rate limit reached", type="requests", code="rate_limit_exceeded"
    )


def test_anthropic_style_error_object() -> None:
    body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert decode_error_body(529, body, JSON) == ApiError(message="Overloaded", type="overloaded_error")


def test_fastapi_detail_string() -> None:
    assert decode_error_body(404, b'{"detail":"Not Found"}', JSON) == ApiError(message="Not Found")


def test_fastapi_detail_list_is_summarised_by_location() -> None:
    body = orjson.dumps(
        {
            "detail": [
                {"type": "missing", "loc": ["body", "model"], "msg": "Field required", "input": {}},
                {"type": "int_parsing", "loc": ["body", "max_tokens"], "msg": "Input should be a valid integer"},
            ]
        }
    )
    assert decode_error_body(422, body, JSON) == ApiError(
        message="body.model: Field required; body.max_tokens: Input should be a valid integer", type="missing"
    )


def test_tgi_and_ollama_string_error() -> None:
    assert decode_error_body(404, b'{"error":"model \'x\' not found"}', JSON) == ApiError(message="model 'x' not found")


def test_old_vllm_error_object() -> None:
    body = b'{"object":"error","message":"max_tokens too large","type":"BadRequestError","param":null,"code":400}'
    assert decode_error_body(400, body, JSON) == ApiError(
        message="max_tokens too large", type="BadRequestError", code=400
    )


def test_html_error_page_gives_its_title() -> None:
    body = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>nginx</body></html>"
    assert decode_error_body(502, body, "text/html").message == "502 Bad Gateway"


def test_html_error_page_without_title_gives_its_text() -> None:
    body = b"<html><body><h1>Service   Unavailable</h1>\n<p>try later</p></body></html>"
    assert decode_error_body(503, body, "text/html").message == "Service Unavailable try later"


def test_plain_text_body_gives_its_first_characters() -> None:
    error = decode_error_body(500, b"Internal error: " + b"x" * 1000, "text/plain")
    assert error.message.startswith("Internal error: xxx")
    assert len(error.message) == ERROR_TEXT_CHARS


def test_json_that_is_not_an_error_object_is_quoted() -> None:
    assert "hello" in decode_error_body(500, b'{"hello": 1}', JSON).message


def test_broken_json_is_treated_as_text() -> None:
    assert decode_error_body(500, b'{"error": ', JSON).message == '{"error":'


def test_empty_body_says_so() -> None:
    assert decode_error_body(503, b"", None) == ApiError(message="HTTP 503 with an empty body")


def test_traceback_excerpt_is_dropped_from_a_message() -> None:
    body = orjson.dumps({"error": {"message": 'bad thing\n\n  File "/x.py", line 3, in f\n    g()', "type": "e"}})
    assert decode_error_body(500, body, JSON).message == "bad thing"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([None, JSON, "text/html", "text/plain"]))
def test_error_body_decoding_never_raises(body: bytes, content_type: str | None) -> None:
    assert isinstance(decode_error_body(500, body, content_type).message, str)


def test_an_ollama_stream_error_line_reads_like_its_error_body() -> None:
    line = {"error": 'model "nope" not found, try pulling it first'}
    assert api_error_from(line) == decode_error_body(404, orjson.dumps(line), JSON)
