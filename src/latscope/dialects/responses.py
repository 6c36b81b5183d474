"""OpenAI's Responses API (``POST /v1/responses``): request builder, event-stream decoder, body decoder.

Reference: OpenAI API reference, "Responses" and "Streaming events". A stream is SSE with typed events, each
event's data a JSON object whose ``type`` repeats the SSE type and whose ``sequence_number`` counts up::

    event: response.created               {"type":"response.created","response":{"id":…,"status":"in_progress",…}}
    event: response.output_item.added     {"type":"response.output_item.added","output_index":0,"item":{…}}
    event: response.output_text.delta     {"type":"response.output_text.delta","output_index":0,"delta":"Hi",…}
    event: response.completed             {"type":"response.completed","response":{…,"usage":{"input_tokens":…,
                                           "output_tokens":…,"output_tokens_details":{"reasoning_tokens":…}}}}

There is no ``[DONE]``: ``response.completed``, ``response.incomplete`` (the output limit was reached) or
``response.failed`` ends the stream. Kinds: ``response.output_text.delta`` and ``response.refusal.delta`` (text
the user sees) → CONTENT; ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta`` →
REASONING; ``response.function_call_arguments.delta`` (and the custom / MCP tool-call argument deltas) →
TOOL_CALL; one token each; ``response.created`` → ROLE; ``response.completed`` / ``response.incomplete`` → FINISH
with the usage and a finish reason (``stop``, or the incomplete reason such as ``max_output_tokens``);
``response.failed`` and ``error`` → ERROR; every other event (item and part added / done, ``…done`` events that
repeat the whole text) → OTHER.
"""

from __future__ import annotations

from typing import Any, Unpack

from latscope.dialects.base import (
    SSE_MEDIA_TYPE,
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
from latscope.dialects.usage import int_or_none, token_usage
from latscope.timeline.model import EventKind, Usage

RESPONSES_NAME = "openai.responses"
RESPONSES_PATH = "/responses"

_TOKEN_EVENTS: dict[str, EventKind] = {
    "response.output_text.delta": EventKind.CONTENT,
    "response.refusal.delta": EventKind.CONTENT,
    "response.reasoning_text.delta": EventKind.REASONING,
    "response.reasoning_summary_text.delta": EventKind.REASONING,
    "response.function_call_arguments.delta": EventKind.TOOL_CALL,
    "response.custom_tool_call_input.delta": EventKind.TOOL_CALL,
    "response.mcp_call_arguments.delta": EventKind.TOOL_CALL,
}
"""The delta events that carry generated text, and the kind of token each is."""

_FINAL_EVENTS = ("response.completed", "response.incomplete")
_OTHER_CHUNK = Chunk(EventKind.OTHER)


def responses_request(
    model: str, prompt: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /responses`` request: prompt text as ``input``, or a chat ``messages`` list as ``input`` items
    (token ids raise :class:`ValueError`). ``max_tokens`` becomes ``max_output_tokens``; the API reports usage in
    every ``response.completed``, so ``include_usage`` changes nothing; ``ignore_eos`` raises :class:`ValueError`.
    ``extra`` fields (``reasoning``, ``tools``, ``store`` …) are merged last and win."""
    refuse_ignore_eos(options, RESPONSES_NAME, "the Responses API")
    body: dict[str, object] = {
        "model": model,
        "input": prompt if isinstance(prompt, str) else prompt_messages(prompt, RESPONSES_NAME),
    }
    if max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    body["stream"] = options.get("stream", True)
    if options.get("temperature") is not None:
        body["temperature"] = options["temperature"]
    body.update(options.get("extra") or {})
    return json_request(
        RESPONSES_PATH,
        body,
        dialect=RESPONSES_NAME,
        model=model,
        max_tokens=max_tokens,
        stream=body.get("stream") is True,
    )


def _usage(usage: Any) -> Usage | None:
    """A Usage from a Responses ``usage`` object (``input_tokens``, ``output_tokens`` and their details)."""
    return token_usage(usage, "input", "output") if usage.__class__ is dict else None


def _finish_reason(response: dict[str, Any]) -> str:
    """``stop`` for a completed response, else the reason it is incomplete (``max_output_tokens``, …) or its status."""
    details = response.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        return str(details["reason"])
    status = response.get("status")
    return "stop" if status in (None, "completed") else str(status)


class ResponsesStreamDecoder(JsonEventDecoder):
    """Decodes a Responses event stream into one chunk per event (the kinds: see the module docstring)."""

    name = "openai.responses"
    terminal = "response.completed (or .incomplete / .failed)"
    # read by no token event: the event counter, and OpenAI's random padding of delta events (``obfuscation``)
    template_numbers = frozenset({"sequence_number"})
    template_strings = frozenset({"obfuscation"})

    def decode_object(self, event_type: str, obj: dict[str, Any]) -> Chunk:
        kind = obj.get("type", event_type)
        token = _TOKEN_EVENTS.get(kind)
        if token is not None:
            return token_chunk(token, obj["delta"], obj)
        if kind in _FINAL_EVENTS:
            self.ended = True
            response = obj["response"]
            if response.__class__ is not dict:
                raise UnknownShape(kind)
            sent_ns, extra = lab_stamp(obj)
            lab = response.get("latscope")  # the lab keeps its fields on the response object, like the body's
            if lab.__class__ is dict:
                extra = {"latscope": lab}
                sent_ns = sent_ns if sent_ns is not None else int_or_none(lab.get("sent_ns"))
            return Chunk(
                EventKind.FINISH,
                finish_reason=_finish_reason(response),
                usage=_usage(response.get("usage")),
                server_sent_ns=sent_ns,
                extra=extra,
            )
        if kind == "response.failed":
            self.ended = True
            response = obj["response"]
            error = response.get("error") if response.__class__ is dict else None
            return Chunk(EventKind.ERROR, error=api_error_from({"error": error} if error else obj))
        if kind == "error":
            self.ended = True
            inner = obj.get("error")
            return Chunk(EventKind.ERROR, error=api_error_from(obj if inner is not None else {"error": obj}))
        if kind == "response.created":
            return Chunk(EventKind.ROLE)
        if kind.__class__ is str and kind.startswith("response."):
            return _OTHER_CHUNK  # added / in_progress / done events: no new token
        raise UnknownShape(kind)


def decode_response_body(body: bytes) -> DecodedResponse:
    """A non-streamed ``response`` object: the ``output_text`` parts of its message items joined, its reasoning
    items' text (or summaries) as reasoning, the usage and a finish reason; an error in ``error``. Raises
    :class:`StreamDecodeError` when the body is not a JSON object."""
    obj = decode_json_object(body)
    if (obj.get("error") and obj.get("object") != "response") or obj.get("status") == "failed":
        return DecodedResponse(text="", error=api_error_from(obj))
    texts: list[str] = []
    reasoning: list[str] = []
    output = obj.get("output")
    for item in output if isinstance(output, list) else []:
        if not isinstance(item, dict):
            continue
        parts = item.get("content") or []
        if item.get("type") == "reasoning":
            parts = [*(item.get("content") or []), *(item.get("summary") or [])]
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])  # what the user sees instead of an answer
            elif isinstance(part.get("text"), str):
                (texts if part.get("type") == "output_text" else reasoning).append(part["text"])
    return DecodedResponse(
        text="".join(texts),
        finish_reason=_finish_reason(obj),
        usage=_usage(obj.get("usage")),
        reasoning="".join(reasoning),
    )


RESPONSES = Dialect(
    name=RESPONSES_NAME,
    description="OpenAI Responses (POST /v1/responses): OpenAI's newer API, typed events, usage on every stream",
    build_request=responses_request,
    framing=Framing.SSE,
    stream_media_types=(SSE_MEDIA_TYPE,),
    new_decoder=ResponsesStreamDecoder,
    decode_response=decode_response_body,
    decode_error=decode_error_body,
    parse_models=parse_models,
)
"""The OpenAI Responses dialect."""
