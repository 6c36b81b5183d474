"""The streams of the APIs of :mod:`latscope.lab.apis`, event by event: what the lab writes before the first token,
for each token, and after the last, for Anthropic Messages, OpenAI Responses, TGI native and Ollama native.

Every format has the same face as the OpenAI one the :class:`~latscope.lab.writer.StreamWriter` already writes:
:meth:`token_event` (the hot path: the bytes around a token are serialised once per response, so a token event is
one concatenation), :meth:`opening` and :meth:`closing` (built once per response). Under ``--truth`` every event
carries ``"latscope":{"sent_ns":N}`` (``time.monotonic_ns()`` just before the write), as the OpenAI stream does;
the lab's ``latscope`` request fields (its phases, ms) ride on the final event of each stream.

Shapes (each API's documentation): Anthropic ``message_start``, ``content_block_start``, ``ping``, one
``content_block_delta``/``text_delta`` per token, ``content_block_stop``, ``message_delta`` (stop reason, usage),
``message_stop``; Responses ``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, one ``response.output_text.delta`` per token, the ``…done`` events,
``response.completed`` (usage); TGI one ``data:`` token object per token, the last with ``generated_text`` and
``details``; Ollama one NDJSON object per token, then ``"done": true`` with its durations in nanoseconds.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

from latscope.lab.scheduler import RequestStats, TokenOut


def arguments_piece(token: TokenOut, *, first: bool) -> str:
    """The piece of a streamed tool call's JSON arguments (``{"text": "…"}``) that carries ``token``: its text as
    it sits inside a JSON string, the object's opening before the ``first`` token and its close after the last.
    Every API streams arguments as such pieces of one JSON text (OpenAI ``tool_calls[].function.arguments``,
    Anthropic ``input_json_delta``, Responses ``function_call_arguments.delta``)."""
    piece = orjson.dumps(token.text)[1:-1].decode()
    if first:
        piece = '{"text": "' + piece
    if token.finish_reason is not None:
        piece += '"}'
    return piece


SSE = b"text/event-stream"
NDJSON = b"application/x-ndjson"

FinalFields = Callable[[], dict[str, Any]]
"""The lab's own fields for the last event (``{"latscope": {...}}``), computed when it is written."""


class StreamFormat(Protocol):
    """One API's stream, as the stream writer needs it."""

    media_type: bytes

    def opening(self) -> list[dict[str, Any]]:
        """The events before the first token (objects; :meth:`frame` writes them)."""
        ...

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        """One token's event, with the ``--truth`` stamp when ``sent_ns`` is given."""
        ...

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        """The events after the last token (the final one with the lab's fields)."""
        ...

    def frame(self, obj: dict[str, Any]) -> bytes:
        """One event object as bytes on the wire."""
        ...

    def failed(self, message: str) -> bytes:
        """An error event, for a generation that fails mid-stream."""
        ...


def _stamped(event: bytes, sent_ns: int | None, close: bytes, tail: bytes) -> bytes:
    """``event`` (an object's bytes without its closing ``close``) with the stamp added, then ``close`` + ``tail``."""
    if sent_ns is None:
        return event + close + tail
    return b'%b,"latscope":{"sent_ns":%d}%b%b' % (event, sent_ns, close, tail)


class AnthropicFormat:
    """Anthropic Messages' event stream (one text block)."""

    media_type = SSE

    def __init__(self, message_id: str, model: str, prompt_tokens: int, final: FinalFields) -> None:
        self.message_id = message_id
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.final = final
        self._head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":'
        )

    def opening(self) -> list[dict[str, Any]]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 1},
        }
        return [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "ping"},
        ]

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        return _stamped(self._head + orjson.dumps(token.text) + b"}", sent_ns, b"}", b"\n\n")

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        stop = "max_tokens" if reason == "length" else "end_turn"
        return [
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion_tokens},
                **self.final(),
            },
            {"type": "message_stop"},
        ]

    def frame(self, obj: dict[str, Any]) -> bytes:
        return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def failed(self, message: str) -> bytes:
        return self.frame({"type": "error", "error": {"type": "api_error", "message": message}})


class AnthropicToolFormat(AnthropicFormat):
    """Anthropic Messages' stream of an answer that calls ``tool``: one ``tool_use`` block whose input is
    ``{"text": <the generated tokens>}``, streamed one ``input_json_delta`` per token (the first opens the object, the
    last closes it), ``stop_reason`` ``tool_use``."""

    def __init__(self, message_id: str, model: str, prompt_tokens: int, final: FinalFields, tool: str) -> None:
        super().__init__(message_id, model, prompt_tokens, final)
        self.tool = tool
        self.opened = False
        self._head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"input_json_delta","partial_json":'
        )

    def opening(self) -> list[dict[str, Any]]:
        events = super().opening()
        block = {"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": self.tool, "input": {}}
        events[1] = {"type": "content_block_start", "index": 0, "content_block": block}
        return events

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        piece = arguments_piece(token, first=not self.opened)
        self.opened = True
        return _stamped(self._head + orjson.dumps(piece) + b"}", sent_ns, b"}", b"\n\n")

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        events = super().closing(reason, prompt_tokens, completion_tokens)
        events[1]["delta"]["stop_reason"] = "tool_use"
        return events


class AnthropicThinkingFormat(AnthropicFormat):
    """Anthropic Messages' stream of an answer that thinks first (``thinking`` enabled): the first ``thinking``
    tokens as ``thinking_delta`` events in block 0 (closed by a ``signature_delta``), the rest as ``text_delta``
    events in block 1."""

    def __init__(self, message_id: str, model: str, prompt_tokens: int, final: FinalFields, thinking: int) -> None:
        super().__init__(message_id, model, prompt_tokens, final)
        self.thinking = thinking
        self._thinking_head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"thinking_delta","thinking":'
        )
        self._head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
            b'"delta":{"type":"text_delta","text":'
        )

    def opening(self) -> list[dict[str, Any]]:
        events = super().opening()
        events[1] = {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
        return events

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        if token.index < self.thinking:
            return _stamped(self._thinking_head + orjson.dumps(token.text) + b"}", sent_ns, b"}", b"\n\n")
        event = super().token_event(token, sent_ns)
        if token.index > self.thinking:
            return event
        # the first text token: the thinking block ends (signed) and the text block starts, in the same write
        switch = [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "lab"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        ]
        return b"".join(map(self.frame, switch)) + event

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        events = super().closing(reason, prompt_tokens, completion_tokens)
        events[0]["index"] = 1
        return events


class ResponsesFormat:
    """OpenAI Responses' event stream (one message item with one output_text part)."""

    media_type = SSE

    def __init__(self, response_id: str, model: str, created: int, final: FinalFields) -> None:
        self.response_id = response_id
        self.item_id = "msg_" + secrets.token_hex(12)
        self.model = model
        self.created = created
        self.final = final
        self.sequence = 0
        self.texts: list[str] = []
        self._head = (
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"'
            + self.item_id.encode()
            + b'","output_index":0,"content_index":0,"delta":'
        )

    def response(self, status: str) -> dict[str, Any]:
        """The response object as the created / completed events carry it."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": [],
            "usage": None,
        }

    def opening(self) -> list[dict[str, Any]]:
        item = {"id": self.item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            {"type": "response.created", "response": self.response("in_progress")},
            {"type": "response.in_progress", "response": self.response("in_progress")},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {
                "type": "response.content_part.added",
                "item_id": self.item_id,
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
        ]

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        self.texts.append(token.text)
        self.sequence += 1
        event = b'%b%b,"sequence_number":%d' % (self._head, orjson.dumps(token.text), self.sequence)
        return _stamped(event, sent_ns, b"}", b"\n\n")

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        text = "".join(self.texts)
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {"id": self.item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        status = "incomplete" if reason == "length" else "completed"
        response = {
            **self.response(status),
            "output": [item],
            "incomplete_details": {"reason": "max_output_tokens"} if reason == "length" else None,
            "usage": responses_usage(prompt_tokens, completion_tokens),
            **self.final(),
        }
        return [
            {"type": "response.output_text.done", "item_id": self.item_id, "output_index": 0, "content_index": 0,
             "text": text},
            {"type": "response.content_part.done", "item_id": self.item_id, "output_index": 0, "content_index": 0,
             "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": f"response.{status}", "response": response},
        ]  # fmt: skip

    def frame(self, obj: dict[str, Any]) -> bytes:
        self.sequence += 1
        obj.setdefault("sequence_number", self.sequence)
        return b"event: " + str(obj["type"]).encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def failed(self, message: str) -> bytes:
        return self.frame({"type": "error", "code": "server_error", "message": message, "param": None})


class ResponsesToolFormat(ResponsesFormat):
    """OpenAI Responses' stream of an answer that calls ``tool``: one ``function_call`` item whose ``arguments``
    (``{"text": <the generated tokens>}``) arrive one ``response.function_call_arguments.delta`` per token."""

    def __init__(self, response_id: str, model: str, created: int, final: FinalFields, tool: str) -> None:
        super().__init__(response_id, model, created, final)
        self.tool = tool
        self.item_id = "fc_" + secrets.token_hex(12)
        self.call_id = "call_" + secrets.token_hex(12)
        self.opened = False
        self.pieces: list[str] = []
        self._head = (
            b'event: response.function_call_arguments.delta\ndata: {"type":"response.function_call_arguments.delta",'
            b'"item_id":"' + self.item_id.encode() + b'","output_index":0,"delta":'
        )

    def item(self, status: str, arguments: str) -> dict[str, Any]:
        """The function call item."""
        return {
            "type": "function_call",
            "id": self.item_id,
            "call_id": self.call_id,
            "name": self.tool,
            "arguments": arguments,
            "status": status,
        }

    def opening(self) -> list[dict[str, Any]]:
        events = super().opening()[:2]
        events.append({"type": "response.output_item.added", "output_index": 0, "item": self.item("in_progress", "")})
        return events

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        piece = arguments_piece(token, first=not self.opened)
        self.opened = True
        self.pieces.append(piece)
        self.sequence += 1
        event = b'%b%b,"sequence_number":%d' % (self._head, orjson.dumps(piece), self.sequence)
        return _stamped(event, sent_ns, b"}", b"\n\n")

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        arguments = "".join(self.pieces)
        item = self.item("completed", arguments)
        response = {
            **self.response("completed"),
            "output": [item],
            "incomplete_details": None,
            "usage": responses_usage(prompt_tokens, completion_tokens),
            **self.final(),
        }
        return [
            {"type": "response.function_call_arguments.done", "item_id": self.item_id, "output_index": 0,
             "arguments": arguments},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]  # fmt: skip


def responses_usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The Responses API's ``usage`` object."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def token_id(text: str) -> int:
    """A stable id for a lab token's text (the lab has no vocabulary; TGI's stream carries ids)."""
    return sum(text.encode()) * 31 % 32_000 + 3


class TgiFormat:
    """TGI's ``/generate_stream``: one token object per event; the last carries ``generated_text`` and ``details``."""

    media_type = SSE

    def __init__(self, prompt_tokens: int, seed: int | None, final: FinalFields) -> None:
        self.prompt_tokens = prompt_tokens
        self.seed = seed
        self.final = final
        self.texts: list[str] = []

    def opening(self) -> list[dict[str, Any]]:
        return []

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        self.texts.append(token.text)
        text = orjson.dumps(token.text)
        head = b'data:{"index":%d,"token":{"id":%d,"text":%b,"logprob":-0.25,"special":false}' % (
            token.index + 1,
            token_id(token.text),
            text,
        )
        if token.finish_reason is None:
            return _stamped(head + b',"generated_text":null,"details":null,"top_tokens":null', sent_ns, b"}", b"\n\n")
        details = {
            "finish_reason": token.finish_reason,
            "generated_tokens": len(self.texts),
            "seed": self.seed,
            "input_length": self.prompt_tokens,
        }
        last = {"generated_text": "".join(self.texts), "details": details, "top_tokens": None, **self.final()}
        if sent_ns is not None:
            last.setdefault("latscope", {})["sent_ns"] = sent_ns
        return head + b"," + orjson.dumps(last)[1:] + b"\n\n"

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        return []  # the last token's event was the final one

    def frame(self, obj: dict[str, Any]) -> bytes:
        return b"data:" + orjson.dumps(obj) + b"\n\n"

    def failed(self, message: str) -> bytes:
        return self.frame({"error": message, "error_type": "generation"})


def ollama_durations(stats: RequestStats, received_ns: int) -> dict[str, int]:
    """Ollama's duration fields (nanoseconds) from the engine's stats: the queue as ``load_duration`` (Ollama's
    scheduler wait and model load), prefill as ``prompt_eval_duration``, decode as ``eval_duration``."""
    now = time.monotonic_ns()
    prefill = (stats.prefill_ms or 0.0) * 1e6
    decode = (stats.decode_ms or 0.0) * 1e6
    return {
        "total_duration": now - received_ns,
        "load_duration": round((stats.queue_ms or 0.0) * 1e6),
        "prompt_eval_count": stats.prompt_tokens,
        "prompt_eval_duration": round(prefill),
        "eval_count": stats.completion_tokens,
        "eval_duration": round(decode),
    }


def ollama_created_at() -> str:
    """Ollama's ``created_at``: RFC 3339 UTC with nanoseconds' worth of digits."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class OllamaFormat:
    """Ollama's NDJSON stream (``/api/chat`` objects with ``message``, ``/api/generate`` with ``response``)."""

    media_type = NDJSON

    def __init__(self, model: str, chat: bool, durations: Callable[[], dict[str, int]], final: FinalFields) -> None:
        self.model = model
        self.chat = chat
        self.durations = durations
        self.final = final
        created = orjson.dumps(ollama_created_at())
        self._head = b'{"model":%b,"created_at":%b,' % (orjson.dumps(model), created)
        self._open = b'"message":{"role":"assistant","content":' if chat else b'"response":'
        self._close = b'},"done":false' if chat else b',"done":false'

    def opening(self) -> list[dict[str, Any]]:
        return []

    def token_event(self, token: TokenOut, sent_ns: int | None) -> bytes:
        return _stamped(self._head + self._open + orjson.dumps(token.text) + self._close, sent_ns, b"}", b"\n")

    def closing(self, reason: str, prompt_tokens: int, completion_tokens: int) -> list[dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "created_at": ollama_created_at()}
        if self.chat:
            body["message"] = {"role": "assistant", "content": ""}
        else:
            body["response"] = ""
        body.update({"done": True, "done_reason": reason, **self.durations(), **self.final()})
        return [body]

    def frame(self, obj: dict[str, Any]) -> bytes:
        return orjson.dumps(obj) + b"\n"

    def failed(self, message: str) -> bytes:
        return self.frame({"error": message})
