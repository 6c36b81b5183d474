"""Error bodies, whatever server sent them: a 4xx/5xx body, or an error object in a stream, as an :class:`ApiError`.

Servers disagree on the shape (tests/fixtures/real/ has captures), and it rarely depends on the API a request spoke:
a FastAPI or pydantic validation error, an HTML page from a proxy or an OpenAI-style object can answer any of them.
So every dialect decodes its errors here, and one that knows a shape of its own adds it to
:func:`api_error_from` rather than keeping a copy.

Shapes read: OpenAI / llama.cpp / Anthropic ``{"error": {"message", "type", "code", "param"}}``; TGI and Ollama
``{"error": "...", "error_type": ...}``; older vLLM ``{"object": "error", "message": ...}``; FastAPI ``{"detail":
"..."}`` or ``{"detail": [{"loc", "msg", "type"}, ...]}``; llama-cpp-python's validation error with a traceback
excerpt; plain text and HTML error pages.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

import orjson

from latscope.dialects.base import ApiError, as_text, excerpt

ERROR_TEXT_CHARS = 200
"""How much of a non-JSON error body (plain text, an HTML page) becomes the error message."""

_TITLE_RE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_TAG_RE = re.compile(r"<[^>]*>")
_SPACE_RE = re.compile(r"\s+")
# llama-cpp-python answers request validation errors with HTTP 500 and appends a traceback excerpt to the message
# (tests/fixtures/real/llama-cpp-python.chat.badrequest.http): the message ends where the first frame starts.
_TRACEBACK_RE = re.compile(r'\n\s*(?:Traceback \(most recent call last\)|File ")')


def decode_error_body(status: int, body: bytes, content_type: str | None) -> ApiError:
    """The error a 4xx/5xx response body describes, whatever shape it has. Never raises.

    Shapes: OpenAI / llama.cpp / Anthropic ``{"error": {"message", "type", "code", "param"}}``; TGI and Ollama
    ``{"error": "...", "error_type": ...}``; older vLLM ``{"object": "error", "message": ...}``; FastAPI
    ``{"detail": "..."}`` or ``{"detail": [{"loc", "msg", "type"}, ...]}``; llama-cpp-python's validation error with
    a traceback excerpt (the excerpt is dropped, the validation errors are summarised); anything else — plain text,
    an HTML error page (its title, else its text) — gives the first :data:`ERROR_TEXT_CHARS` characters.
    """
    try:
        return _decode_error_body(status, body, content_type)
    except Exception:  # a decoder of last resort must not turn a server's error into a client crash
        return ApiError(message=f"HTTP {status} with an undecodable error body ({len(body)} bytes)")


def _decode_error_body(status: int, body: bytes, content_type: str | None) -> ApiError:
    stripped = body.strip()
    if not stripped:
        return ApiError(message=f"HTTP {status} with an empty body")
    error = _object_error(stripped) if stripped[:1] in (b"{", b"[") else None
    if error is not None:
        return error
    if (content_type and "html" in content_type.lower()) or stripped[:1] == b"<":
        title = _TITLE_RE.search(stripped)
        raw = title.group(1) if title else stripped
        text = _TAG_RE.sub(" ", raw.decode("utf-8", "replace"))
    else:
        text = stripped.decode("utf-8", "replace")
    return ApiError(message=_SPACE_RE.sub(" ", text).strip()[:ERROR_TEXT_CHARS] or f"HTTP {status}")


def api_error_from(obj: Mapping[str, Any]) -> ApiError:
    """An :class:`ApiError` from a decoded JSON error object (shapes: see :func:`decode_error_body`)."""
    error = obj.get("error")
    if isinstance(error, dict):
        message = as_text(error.get("message")) or as_text(error.get("detail")) or orjson.dumps(error).decode()
        return ApiError(
            message=_clean_message(message),
            type=_opt_str(error.get("type")),
            code=_code(error.get("code")),
            param=_opt_str(error.get("param")),
        )
    if isinstance(error, str):
        return ApiError(message=_clean_message(error), type=_opt_str(obj.get("error_type") or obj.get("type")))
    detail = obj.get("detail")
    if isinstance(detail, str):
        return ApiError(message=detail)
    if isinstance(detail, list):
        items = [item for item in detail if isinstance(item, dict)]
        summary = "; ".join(_validation_item(item) for item in items) or orjson.dumps(detail).decode()
        return ApiError(message=summary, type=_opt_str(items[0].get("type")) if items else None)
    plain = obj.get("message")
    if isinstance(plain, str):
        return ApiError(
            message=_clean_message(plain),
            type=_opt_str(obj.get("type")),
            code=_code(obj.get("code")),
            param=_opt_str(obj.get("param")),
        )
    return ApiError(message=excerpt(orjson.dumps(obj), ERROR_TEXT_CHARS))


def api_error_from_text(data: str) -> ApiError:
    """The payload of an SSE ``event: error``: a JSON error object, or plain text."""
    error = _object_error(data)
    if error is not None:
        return error
    return ApiError(message=_SPACE_RE.sub(" ", data).strip()[:ERROR_TEXT_CHARS] or "error event without data")


def _object_error(data: str | bytes) -> ApiError | None:
    """:func:`api_error_from` of ``data`` when it is a JSON object, else None."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return api_error_from(obj) if isinstance(obj, dict) else None


def _clean_message(message: str) -> str:
    """Drop a traceback excerpt from a message; summarise the pydantic validation errors printed before it."""
    match = _TRACEBACK_RE.search(message)
    if match is None:
        return message
    head = message[: match.start()].strip()
    lines = head.splitlines()
    summaries = []
    for line in lines[1:]:
        summary = _pydantic_repr_summary(line.strip())
        if summary:
            summaries.append(summary)
    if summaries:
        return f"{lines[0].strip()} {'; '.join(summaries)}"
    return _SPACE_RE.sub(" ", head)


def _pydantic_repr_summary(text: str) -> str | None:
    """``loc: msg`` from one printed pydantic error dict (``{'type': ..., 'loc': (...), 'msg': ...}``), or None."""
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        item = ast.literal_eval(text)  # literals only: safe on untrusted text
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return _validation_item(item) if isinstance(item, dict) and "msg" in item else None


def _validation_item(item: dict[Any, Any]) -> str:
    """``body.messages: Input should be a valid list`` from a FastAPI / pydantic error item."""
    loc = item.get("loc")
    where = ".".join(str(part) for part in loc) if isinstance(loc, list | tuple) else ""
    msg = str(item.get("msg", ""))
    return f"{where}: {msg}" if where else msg


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _code(value: object) -> str | int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str | int):
        return value
    return str(value)
