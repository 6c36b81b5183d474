"""Ollama's native API (``/api/chat``, ``/api/generate``): request builders and an NDJSON stream decoder.

Base URL: the native API lives at the server root, so pass the root as the base URL — ``http://localhost:11434`` —
and the request paths here (``/api/chat``, ``/api/generate``) are appended to it. ``http://localhost:11434/v1`` is
Ollama's OpenAI-compatible API, which the OpenAI dialects speak; it reports only ``usage``, not the durations below.

The stream is newline-delimited JSON (https://github.com/ollama/ollama/blob/main/docs/api.md): one object per line,
each carrying one token's text (``message.content`` for chat, ``response`` for generate; ``thinking`` for reasoning
models), and a final object with ``"done": true`` carrying ``done_reason`` and the request's statistics::

    {"model":"llama3.2","created_at":"…","message":{"role":"assistant","content":" Hello"},"done":false}
    {"model":"llama3.2","created_at":"…","message":{"role":"assistant","content":""},"done":true,
     "done_reason":"stop","total_duration":…,"load_duration":…,"prompt_eval_count":26,
     "prompt_eval_duration":…,"eval_count":290,"eval_duration":…}

Durations are NANOSECONDS. The decoder turns the final object into a FINISH chunk with ``Usage(prompt_eval_count,
eval_count)`` and the raw duration and count fields in ``Chunk.extra`` (read by
:func:`latscope.signals.join.apply_server_signals`). A chat object whose ``message.tool_calls`` carries a call (sent
whole, ``arguments`` an object) is a TOOL_CALL chunk with the arguments as compact JSON. An ``{"error": "…"}`` line
becomes an ERROR chunk. A line that is not a JSON object raises :class:`~latscope.dialects.base.StreamDecodeError`
naming the line and its byte offset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Unpack

import orjson

from latscope.dialects.base import (
    Chunk,
    DecodedResponse,
    Dialect,
    Framing,
    GenerationOptions,
    Prompt,
    RequestSpec,
    StreamDecodeError,
    TextRun,
    json_request,
    prompt_messages,
    prompt_text,
    refuse_ignore_eos,
)
from latscope.dialects.errors import api_error_from, decode_error_body
from latscope.dialects.models import parse_models
from latscope.dialects.templates import EVENTS_PER_TEMPLATE_TRY, PROBE, TEMPLATE_TRIES, EventTemplate
from latscope.dialects.usage import summed_usage
from latscope.sse.limits import DEFAULT_LIMITS, StreamLimitError, StreamLimits
from latscope.timeline.model import EventKind, Usage

OLLAMA_CHAT = "ollama.chat"
OLLAMA_GENERATE = "ollama.generate"
CHAT_PATH = "/api/chat"
GENERATE_PATH = "/api/generate"

# Fields of the final message kept in Chunk.extra: durations (ns) and token counts.
FINAL_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)

NDJSON_MEDIA_TYPE = "application/x-ndjson"
"""What Ollama streams as (``application/ndjson`` and ``application/jsonl`` name the same framing elsewhere)."""

_ACCEPT_NDJSON = ("accept", NDJSON_MEDIA_TYPE)


def _request(
    path: str, dialect: str, model: str, fields: dict[str, object], max_tokens: int | None, options: GenerationOptions
) -> RequestSpec:
    refuse_ignore_eos(options, dialect, "Ollama's API")
    settings: dict[str, object] = {
        name: options[name] for name in ("temperature", "seed") if options.get(name) is not None
    }
    if max_tokens is not None:
        settings["num_predict"] = max_tokens  # Ollama's name for the generation limit
    body: dict[str, object] = {"model": model, **fields, "stream": options.get("stream", True)}
    extra = dict(options.get("extra") or {})
    more = extra.pop("options", None)
    if isinstance(more, Mapping):
        settings.update(more)
    if settings:
        body["options"] = settings
    body.update(extra)
    return json_request(
        path,
        body,
        dialect=dialect,
        model=model,
        max_tokens=max_tokens,
        stream=body.get("stream") is True,
        headers=[_ACCEPT_NDJSON],
    )


def chat_request(
    model: str, messages: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /api/chat`` request (a :class:`~latscope.dialects.base.RequestBuilder`). ``messages`` is a chat
    ``messages`` list or a prompt text sent as one user message; ``max_tokens`` becomes ``options.num_predict``,
    ``temperature`` and ``seed`` go into ``options`` too. Ollama reports token counts on every final message, so
    ``include_usage`` changes nothing; ``ignore_eos`` raises :class:`ValueError` (the API has no such switch).
    ``extra`` fields (``keep_alive``, ``think``, ``format`` …) are added last and win; an ``options`` object in it is
    merged into the options."""
    fields: dict[str, object] = {"messages": prompt_messages(messages, OLLAMA_CHAT)}
    return _request(CHAT_PATH, OLLAMA_CHAT, model, fields, max_tokens, options)


def generate_request(
    model: str, prompt: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /api/generate`` request: the prompt text (a ``messages`` list raises :class:`ValueError`); the
    options are as for :func:`chat_request`."""
    fields: dict[str, object] = {"prompt": prompt_text(prompt, OLLAMA_GENERATE)}
    return _request(GENERATE_PATH, OLLAMA_GENERATE, model, fields, max_tokens, options)


def _count(obj: Mapping[str, Any], key: str, warnings: list[str]) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        warnings.append(f"ollama: {key}={value!r} is not a non-negative integer; ignored")
        return None
    return value


def _usage(obj: Mapping[str, Any], warnings: list[str]) -> Usage | None:
    prompt = _count(obj, "prompt_eval_count", warnings)
    completion = _count(obj, "eval_count", warnings)
    return None if prompt is None and completion is None else summed_usage(prompt, completion)


def _tool_call_text(obj: Mapping[str, Any]) -> str | None:
    """The argument text of a chat object's ``message.tool_calls`` (Ollama sends each call whole, its ``arguments``
    an object: serialised here as compact JSON, calls joined by newlines); None when the object carries no call."""
    message = obj.get("message")
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if not isinstance(calls, list) or not calls:
        return None
    pieces = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            pieces.append(arguments)
        elif arguments is not None:
            pieces.append(orjson.dumps(arguments).decode())
        elif isinstance(function.get("name"), str):
            pieces.append("")
    return "\n".join(pieces) if pieces else None


def _texts(obj: Mapping[str, Any]) -> tuple[str, str, bool]:
    """(content text, reasoning text, has a role) of a chat or generate object."""
    message = obj.get("message")
    if isinstance(message, Mapping):
        content, thinking = message.get("content"), message.get("thinking")
        has_role = "role" in message
    else:
        content, thinking = obj.get("response"), obj.get("thinking")
        has_role = False
    return (
        content if isinstance(content, str) else "",
        thinking if isinstance(thinking, str) else "",
        has_role,
    )


_CONTENT = EventKind.CONTENT
_new_chunk = tuple.__new__  # builds a Chunk without its Python-level __new__; every field is given, in order
_PLAIN_TOKEN_TAIL = (None, None, None, None, None, None, 0)  # a token chunk's fields after its count: nothing attached
_UNREAD_STRINGS = frozenset({"created_at"})  # read by no token line: a template hole (it changes every line)


def decode_object(obj: Mapping[str, Any], warnings: list[str]) -> Chunk:
    """One decoded NDJSON object → one Chunk (see the module docstring)."""
    if obj.get("done") is False and len(obj) <= 4 and "error" not in obj:
        # the common case, a token and nothing else: model, created_at, message (or response), done
        message = obj.get("message")
        text = message.get("content") if message.__class__ is dict else obj.get("response")
        if text and text.__class__ is str and (message is None or len(message) <= 2):
            return _new_chunk(Chunk, (_CONTENT, text, 1, None, None, None, None, None, None, 0))
    if "error" in obj:
        return Chunk(EventKind.ERROR, error=api_error_from(obj))
    content, thinking, has_role = _texts(obj)
    done = obj.get("done") is True
    finish_reason = None
    usage = None
    extra = None
    if done:
        reason = obj.get("done_reason")
        finish_reason = reason if isinstance(reason, str) else None
        usage = _usage(obj, warnings)
        extra = {key: obj[key] for key in FINAL_FIELDS if key in obj}
    tool_text = None if content or thinking else _tool_call_text(obj)
    if content:
        kind, text = EventKind.CONTENT, content
    elif tool_text is not None:
        kind, text = EventKind.TOOL_CALL, tool_text
    elif thinking:
        kind, text = EventKind.REASONING, thinking
    elif done:
        kind, text = EventKind.FINISH, ""
    elif has_role:
        kind, text = EventKind.ROLE, ""
    else:
        kind, text = EventKind.OTHER, ""
    sent_ns = None
    lab = obj.get("latscope")  # the lab's own fields (``--truth``: its send stamp, monotonic ns)
    if isinstance(lab, dict):
        extra = {**(extra or {}), "latscope": lab}
        stamp = lab.get("sent_ns")
        sent_ns = stamp if stamp.__class__ is int else None
    return Chunk(
        kind,
        text=text,
        tokens=1 if text or tool_text is not None else 0,  # Ollama streams one token (or one whole call) per object
        finish_reason=finish_reason,
        usage=usage,
        extra=extra or None,
        server_sent_ns=sent_ns,
    )


class OllamaStreamDecoder:
    """Incremental NDJSON decoder for ``/api/chat`` and ``/api/generate`` streams (a :class:`StreamDecoder`).

    Lines may be split across :meth:`feed` calls anywhere, inside UTF-8 sequences included: a line is decoded only
    once its ``\\n`` has arrived. CRLF line endings and blank lines are accepted.
    """

    def __init__(self, *, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._buffer = bytearray()
        self._offset = 0  #: stream offset of the first byte in the buffer
        self._line_number = 0
        self._done = False
        self._warnings: list[str] = []
        self._template: EventTemplate | None = None  # the stream's token lines' template, when learnt
        self._template_ends: tuple[bytes, bytes] | None = None  # its first and last pieces, encoded
        self._template_builds = 0
        self._templated = 0  # lines decoded by the template

    @property
    def warnings(self) -> list[str]:
        """Non-fatal oddities: unreadable counts, data after the final message, no final message."""
        return self._warnings

    def feed(self, data: bytes) -> list[Chunk] | TextRun:
        """Decode every line ``data`` completes."""
        if not self._buffer and data.find(b"\n") == len(data) - 1:
            # one whole line: the common case when tokens arrive one per read
            chunk = self._line(data[:-1], self._offset)
            self._offset += len(data)
            return [] if chunk is None else [chunk]
        if self._buffer:
            self._buffer += data
            data = bytes(self._buffer)
            self._buffer.clear()
        end = data.rfind(b"\n") + 1
        chunks = self._feed_lines(data if end == len(data) else data[:end]) if end else []
        self._buffer += data[end:]
        if len(self._buffer) > self._limits.max_line_bytes:
            raise StreamLimitError(
                f"an NDJSON line grew past {self._limits.max_line_bytes} bytes without ending (the line limit; it "
                f"starts at byte {self._offset} of the stream)",
                "max_line_bytes",
            )
        return chunks

    def _feed_lines(self, data: bytes) -> list[Chunk] | TextRun:
        """:meth:`feed` of whole lines (``data`` ends with its newline): the runs of lines that fit the template
        without parsing JSON, the others one by one."""
        template = self._template
        if template is not None and not self._done and data.find(b"\n") != len(data) - 1:
            try:
                lines: list[str] | None = data.decode().split("\n")
            except UnicodeDecodeError:
                lines = None
            if lines is not None:
                del lines[-1]  # what follows the last newline: nothing
                texts = template.texts(lines) if len(lines) > 1 else None
                if texts is not None:
                    return self._templated_run(texts, len(data))
                return self._feed_runs(data, lines, template.misfits(lines))
        return self._feed_each(data.split(b"\n")[:-1])

    def _feed_runs(self, data: bytes, lines: list[str], misfits: list[int]) -> list[Chunk]:
        """The chunks of ``lines`` (``data`` decoded and split), the runs between the ``misfits`` by the template."""
        raw = data.split(b"\n")
        chunks: list[Chunk] = []
        at = 0
        for misfit in misfits:
            texts = None
            if misfit - at > 1 and self._template is not None and not self._done:
                texts = self._template.texts(lines[at:misfit])
            if texts is not None:
                chunks += self._templated_run(texts, sum(map(len, raw[at:misfit])) + misfit - at)
            else:
                chunks += self._feed_each(raw[at:misfit])
            if misfit < len(lines):
                chunks += self._feed_each(raw[misfit : misfit + 1])
            at = misfit + 1
        return chunks

    def _templated_run(self, texts: list[str], size: int) -> TextRun:
        """The chunks of a run of token lines that fit the template (their texts), ``size`` bytes with newlines."""
        self._line_number += len(texts)
        self._offset += size
        self._templated += len(texts)
        return TextRun(_CONTENT, texts)

    def _feed_each(self, lines: list[bytes]) -> list[Chunk]:
        """The chunks of whole ``lines`` (without their newlines), one by one."""
        chunks: list[Chunk] = []
        offset = self._offset
        line = self._line
        for raw in lines:
            chunk = line(raw, offset)
            if chunk is not None:
                chunks.append(chunk)
            offset += len(raw) + 1
        self._offset = offset
        return chunks

    def close(self) -> list[Chunk]:
        """The body ended: decode a last line that had no newline, and warn when no ``done: true`` arrived."""
        chunks: list[Chunk] = []
        if self._buffer.strip():
            chunk = self._line(bytes(self._buffer), self._offset)
            if chunk is not None:
                chunks.append(chunk)
        self._offset += len(self._buffer)
        self._buffer.clear()
        if not self._done:
            self._warnings.append('the stream ended without a "done": true message')
        return chunks

    def _line(self, raw: bytes, offset: int) -> Chunk | None:
        self._line_number += 1
        line = raw.strip()
        if not line:
            return None
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            obj = self._lenient_utf8(line, offset, exc)
        if not isinstance(obj, dict):
            raise StreamDecodeError(
                f"line {self._line_number} (byte {offset}) of the NDJSON stream is not a JSON object"
            )
        if self._done:
            self._warnings.append(f'line {self._line_number} arrived after the final "done": true message')
        chunk = decode_object(obj, self._warnings)
        if obj.get("done") is True:
            self._done = True
        else:
            ends = self._template_ends
            if ends is not None and line.startswith(ends[0]) and line.endswith(ends[1]):
                return chunk  # a line the template would fit (read alone, it was parsed: cutting one costs more)
            if chunk[0] is _CONTENT and chunk[3:] == _PLAIN_TOKEN_TAIL:
                # no template, or one this token line does not fit: another is learnt while the budget lasts
                self._template = self._template_ends = None
                if self._template_builds < TEMPLATE_TRIES + self._templated // EVENTS_PER_TEMPLATE_TRY:
                    self._learn_template(line, chunk)
        return chunk

    def _learn_template(self, line: bytes, chunk: Chunk) -> None:
        """Make ``line`` (just decoded into ``chunk``, one token and nothing else) the template of token lines, when
        its text stands in it once as a string value and a probe in its place decodes to the same chunk."""
        self._template_builds += 1
        try:
            template = EventTemplate.learn(line.decode(), chunk[1], strings=_UNREAD_STRINGS)
        except UnicodeDecodeError:
            return
        if template is None:
            return
        try:
            probe = decode_object(orjson.loads(template.probe()), [])
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError):
            return
        if probe == (_CONTENT, PROBE, 1, *_PLAIN_TOKEN_TAIL):
            self._template = template
            self._template_ends = (template.pieces[0].encode(), template.pieces[-1].encode())

    def _lenient_utf8(self, line: bytes, offset: int, error: orjson.JSONDecodeError) -> Any:
        """Retry a line whose only fault is invalid UTF-8 (replaced by U+FFFD, as the SSE parser does)."""
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            self._warnings.append(f"invalid UTF-8 on line {self._line_number} (byte {offset}), replaced by U+FFFD")
            try:
                return orjson.loads(line.decode("utf-8", errors="replace"))
            except orjson.JSONDecodeError as exc:
                error = exc
        raise StreamDecodeError(
            f"invalid JSON on line {self._line_number} (byte {offset}) of the NDJSON stream: {error}"
        ) from None


def decode_response_body(body: bytes) -> DecodedResponse:
    """A non-streamed (``"stream": false``) response or an error body. Raises StreamDecodeError if not JSON."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StreamDecodeError(f"the response body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise StreamDecodeError("the response body is not a JSON object")
    if "error" in obj:
        return DecodedResponse(text="", error=api_error_from(obj))
    warnings: list[str] = []
    content, thinking, _ = _texts(obj)
    reason = obj.get("done_reason")
    return DecodedResponse(
        text=content,
        finish_reason=reason if isinstance(reason, str) else None,
        usage=_usage(obj, warnings),
        reasoning=thinking,
    )


CHAT = Dialect(
    name=OLLAMA_CHAT,
    description="Ollama's native chat API (POST /api/chat at the server root, NDJSON), with its load, prompt-eval "
    "and eval durations",
    build_request=chat_request,
    framing=Framing.NDJSON,
    stream_media_types=(NDJSON_MEDIA_TYPE, "application/ndjson", "application/jsonl"),
    new_decoder=OllamaStreamDecoder,
    decode_response=decode_response_body,
    decode_error=decode_error_body,
    parse_models=parse_models,
    base_path="",
    models_path="/api/tags",
)
"""The Ollama native chat dialect."""

GENERATE = dataclasses.replace(
    CHAT,
    name=OLLAMA_GENERATE,
    description="Ollama's native generate API (POST /api/generate at the server root, NDJSON): a prompt, no chat turns",
    build_request=generate_request,
)
"""The Ollama native generate dialect."""
