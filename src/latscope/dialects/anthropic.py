"""Anthropic's Messages API (``POST /v1/messages``): request builder, event-stream decoder, body decoder.

Reference: Anthropic API documentation, "Messages" and "Streaming Messages". The key goes in ``x-api-key`` (not
``Authorization``) and every request names the API version in ``anthropic-version``. A stream is SSE with a typed
event per step, the event's ``type`` field repeating its SSE type::

    event: message_start        {"type":"message_start","message":{"id":…,"role":"assistant","content":[],
                                 "usage":{"input_tokens":25,"output_tokens":1}}}
    event: content_block_start  {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}
    event: ping                 {"type":"ping"}
    event: content_block_delta  {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}
    event: content_block_stop   {"type":"content_block_stop","index":0}
    event: message_delta        {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}
    event: message_stop         {"type":"message_stop"}

Kinds: ``text_delta`` → CONTENT, ``thinking_delta`` → REASONING, ``input_json_delta`` (a tool call's input, as
partial JSON text) → TOOL_CALL, each one token; ``message_start`` → ROLE; ``message_delta`` → FINISH with
``stop_reason`` and the usage (input tokens from ``message_start`` merged with the output tokens here; cache reads
as ``cached_tokens``); ``message_stop`` → DONE; ``error`` → ERROR (``{"type":"error","error":{"type","message"}}``,
the shape of the API's error bodies too); ``ping``, block starts and stops, ``signature_delta`` and
``citations_delta`` → OTHER. An empty ``partial_json`` (sent before the first real piece) carries no token: OTHER.
"""

from __future__ import annotations

from typing import Any, Unpack

from latscope.dialects.base import (
    SSE_MEDIA_TYPE,
    ApiError,
    Chunk,
    DecodedResponse,
    Dialect,
    Framing,
    GenerationOptions,
    Prompt,
    RequestSpec,
    decode_json_object,
    json_request,
    prompt_messages,
    refuse_ignore_eos,
)
from latscope.dialects.errors import api_error_from, decode_error_body
from latscope.dialects.jsonevents import JsonEventDecoder, UnknownShape, lab_stamp, token_chunk
from latscope.dialects.models import parse_models
from latscope.dialects.usage import int_or_none, summed_usage
from latscope.timeline.model import EventKind, Usage

MESSAGES_NAME = "anthropic.messages"
MESSAGES_PATH = "/messages"

API_VERSION = "2023-06-01"
"""The ``anthropic-version`` every request sends: the version the streaming event shapes above are documented for."""

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when the caller leaves the limit to the server: the Messages API requires one (no server default)."""


_CONTENT = EventKind.CONTENT
_REASONING = EventKind.REASONING
_TOOL_CALL = EventKind.TOOL_CALL
_OTHER_CHUNK = Chunk(EventKind.OTHER)
_DONE_CHUNK = Chunk(EventKind.DONE)


def x_api_key(api_key: str) -> list[tuple[str, str]]:
    """``x-api-key: KEY``: where the Messages API takes the key (redacted like every header named with ``key``)."""
    return [("x-api-key", api_key)]


def messages_request(
    model: str, messages: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /messages`` request. ``messages`` is a chat ``messages`` list or a prompt text sent as one user
    message; ``system`` messages of the list move to the top-level ``system`` field, as the API wants them.
    ``max_tokens`` None sends :data:`DEFAULT_MAX_TOKENS` (the API requires a limit). The API reports usage on every
    stream, so ``include_usage`` changes nothing; ``ignore_eos`` raises :class:`ValueError` (no such switch).
    ``extra`` fields (``thinking``, ``tools``, ``metadata`` …) are merged last and win."""
    refuse_ignore_eos(options, MESSAGES_NAME, "the Messages API")
    turns = prompt_messages(messages, MESSAGES_NAME)
    system = [turn["content"] for turn in turns if turn.get("role") == "system" and isinstance(turn["content"], str)]
    body: dict[str, object] = {
        "model": model,
        "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        "messages": [turn for turn in turns if turn.get("role") != "system"],
    }
    if system:
        body["system"] = "\n\n".join(system)
    body["stream"] = options.get("stream", True)
    for name in ("temperature",):
        if options.get(name) is not None:
            body[name] = options[name]
    body.update(options.get("extra") or {})
    return json_request(
        MESSAGES_PATH,
        body,
        dialect=MESSAGES_NAME,
        model=model,
        max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        stream=body.get("stream") is True,
        headers=[("anthropic-version", API_VERSION)],
    )


def _usage(usage: Any, prompt: Usage | None) -> Usage | None:
    """A Usage from an Anthropic ``usage`` object, its input counts taken from ``prompt`` (``message_start``'s) when
    this one has none. Prompt tokens are the input tokens plus cache reads and writes (Anthropic counts them apart)."""
    if usage.__class__ is not dict:
        return prompt
    inputs = [int_or_none(usage.get(name)) for name in ("input_tokens", "cache_read_input_tokens")]
    written = int_or_none(usage.get("cache_creation_input_tokens"))
    prompt_tokens = None if inputs[0] is None else inputs[0] + (inputs[1] or 0) + (written or 0)
    cached = inputs[1]
    if prompt is not None:
        prompt_tokens = prompt_tokens if prompt_tokens is not None else prompt.prompt_tokens
        cached = cached if cached is not None else prompt.cached_tokens
    output = int_or_none(usage.get("output_tokens"))
    return summed_usage(prompt_tokens, output, cached)


class AnthropicStreamDecoder(JsonEventDecoder):
    """Decodes a Messages event stream into one chunk per event (the kinds: see the module docstring).

    The event's kind is read from its data's ``type`` (which servers always send; the SSE ``event:`` line repeats
    it). A stream that ends without ``message_stop`` gets a warning at close.
    """

    name = "anthropic"
    terminal = "message_stop"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._prompt_usage: Usage | None = None

    def decode_object(self, event_type: str, obj: dict[str, Any]) -> Chunk:
        kind = obj.get("type", event_type)
        if kind == "content_block_delta":
            delta = obj["delta"]
            what = delta["type"]
            if what == "text_delta":
                return token_chunk(_CONTENT, delta["text"], obj)
            if what == "thinking_delta":
                return token_chunk(_REASONING, delta["thinking"], obj)
            if what == "input_json_delta":
                return token_chunk(_TOOL_CALL, delta["partial_json"], obj)
            return _OTHER_CHUNK  # signature_delta, citations_delta
        if kind == "message_start":
            self._prompt_usage = _usage(obj["message"].get("usage"), None)
            return Chunk(EventKind.ROLE, usage=self._prompt_usage)
        if kind == "message_delta":
            reason = obj["delta"].get("stop_reason")
            if reason is not None and reason.__class__ is not str:
                raise UnknownShape(kind)
            sent_ns, extra = lab_stamp(obj)
            usage = _usage(obj.get("usage"), self._prompt_usage)
            return Chunk(EventKind.FINISH, finish_reason=reason, usage=usage, server_sent_ns=sent_ns, extra=extra)
        if kind == "message_stop":
            self.ended = True
            return _DONE_CHUNK
        if kind == "error":
            self.ended = True
            return Chunk(EventKind.ERROR, error=api_error_from(obj))
        if kind in ("ping", "content_block_start", "content_block_stop"):
            return _OTHER_CHUNK
        raise UnknownShape(kind)

    def decode_text(self, event_type: str, data: str) -> Chunk | None:
        """An ``error`` event with plain text (a proxy's) is still an error."""
        if event_type == "error":
            return Chunk(EventKind.ERROR, error=ApiError(message=data.strip()[:200] or "error event without data"))
        return None


def decode_response_body(body: bytes) -> DecodedResponse:
    """A non-streamed ``message`` object: its text blocks joined, its thinking blocks as reasoning, ``stop_reason``
    and usage; an error object (``{"type":"error",…}``) in ``error``. Raises :class:`StreamDecodeError` when the
    body is not a JSON object."""
    obj = decode_json_object(body)
    if obj.get("type") == "error" or "error" in obj:
        return DecodedResponse(text="", error=api_error_from(obj))
    texts: list[str] = []
    thinking: list[str] = []
    content = obj.get("content")
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
    reason = obj.get("stop_reason")
    return DecodedResponse(
        text="".join(texts),
        finish_reason=reason if isinstance(reason, str) else None,
        usage=_usage(obj.get("usage"), None),
        reasoning="".join(thinking),
    )


MESSAGES = Dialect(
    name=MESSAGES_NAME,
    description="Anthropic Messages (POST /v1/messages, key in x-api-key): Anthropic's API, llama.cpp's llama-server",
    build_request=messages_request,
    framing=Framing.SSE,
    stream_media_types=(SSE_MEDIA_TYPE,),
    new_decoder=AnthropicStreamDecoder,
    decode_response=decode_response_body,
    decode_error=decode_error_body,
    parse_models=parse_models,
    credential_headers=x_api_key,
)
"""The Anthropic Messages dialect."""
