"""Hugging Face Text Generation Inference's native API (``POST /generate_stream``, ``POST /generate``).

Reference: TGI's OpenAPI document (``/docs``), schemas ``GenerateRequest``, ``StreamResponse``, ``StreamDetails``,
``GenerateResponse`` and ``ErrorResponse``. The native routes live at the server root (TGI's OpenAI-compatible
routes are under ``/v1`` and spoken by the OpenAI dialects), so the base URL is the root, ``http://host:8080``.

A stream is SSE, one ``data:`` event per generated token (TGI writes ``data:`` without a space)::

    data:{"index":1,"token":{"id":25,"text":" Deep","logprob":-0.31,"special":false},"generated_text":null,
          "details":null,"top_tokens":null}
    data:{"index":20,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":" Deep …",
          "details":{"finish_reason":"eos_token","generated_tokens":20,"seed":null,"input_length":7}}

Every event is one token: CONTENT with its text (a ``special`` token — end of sequence — is a generated token whose
text is not shown: CONTENT with no text); the last one also carries ``details`` (its ``finish_reason``, and
``generated_tokens`` and ``input_length`` as the usage). An error — before the stream or inside it — is ``{"error":
"…", "error_type": "validation" | "generation" | "overloaded" | "incomplete_generation"}``: ERROR. There is no
``[DONE]``: the event with ``details`` (or ``generated_text``) ends the stream.
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
    prompt_text,
    refuse_ignore_eos,
)
from latscope.dialects.errors import api_error_from, decode_error_body
from latscope.dialects.jsonevents import JsonEventDecoder, UnknownShape, lab_stamp
from latscope.dialects.models import parse_models
from latscope.dialects.usage import int_or_none, summed_usage
from latscope.timeline.model import EventKind, Usage

GENERATE_NAME = "tgi.generate"
STREAM_PATH = "/generate_stream"
GENERATE_PATH = "/generate"
INFO_PATH = "/info"

_CONTENT = EventKind.CONTENT
_new_chunk = tuple.__new__  # builds a Chunk without its Python-level __new__; every field is given, in order


def generate_request(
    model: str, prompt: Prompt, max_tokens: int | None, **options: Unpack[GenerationOptions]
) -> RequestSpec:
    """A ``POST /generate_stream`` request (``POST /generate`` with ``stream=False``): the prompt text as
    ``inputs`` (a ``messages`` list raises :class:`ValueError`: the native API applies no chat template),
    ``max_tokens`` as ``parameters.max_new_tokens``, ``temperature`` and ``seed`` in ``parameters``, and ``details``
    asked for so the answer carries its finish reason and token counts. TGI serves one model and reads no model name
    from the body; ``model`` is kept on the spec only. ``ignore_eos`` raises :class:`ValueError` (TGI has no such
    parameter). ``extra`` fields are merged last; a ``parameters`` object in it is merged into the parameters."""
    refuse_ignore_eos(options, GENERATE_NAME, "TGI's native API")
    stream = options.get("stream", True)
    parameters: dict[str, object] = {"details": True}
    if max_tokens is not None:
        parameters["max_new_tokens"] = max_tokens
    for name in ("temperature", "seed"):
        if options.get(name) is not None:
            parameters[name] = options[name]
    extra = dict(options.get("extra") or {})
    more = extra.pop("parameters", None)
    if isinstance(more, dict):
        parameters.update(more)
    body: dict[str, object] = {"inputs": prompt_text(prompt, GENERATE_NAME), "parameters": parameters, **extra}
    return json_request(
        STREAM_PATH if stream else GENERATE_PATH,
        body,
        dialect=GENERATE_NAME,
        model=model,
        max_tokens=max_tokens,
        stream=stream,
    )


def _details(details: Any) -> tuple[str | None, Usage | None]:
    """``(finish_reason, usage)`` of a ``details`` object (``generated_tokens``; ``input_length`` when sent)."""
    if details.__class__ is not dict:
        return None, None
    reason = details.get("finish_reason")
    generated = int_or_none(details.get("generated_tokens"))
    prompt = int_or_none(details.get("input_length"))
    usage = None if generated is None and prompt is None else summed_usage(prompt, generated)
    return (reason if reason.__class__ is str else None), usage


class TgiStreamDecoder(JsonEventDecoder):
    """Decodes a ``/generate_stream`` event stream: one token per event (see the module docstring)."""

    name = "tgi"
    terminal = "an event with details or generated_text"
    # read by no token event: the token's position, id and log-probability
    template_numbers = frozenset({"index", "id", "logprob"})

    def decode_object(self, event_type: str, obj: dict[str, Any]) -> Chunk:
        token = obj.get("token")
        if token is None:
            if "error" in obj:
                self.ended = True
                return Chunk(EventKind.ERROR, error=api_error_from(obj))
            raise UnknownShape("no token")
        text = token["text"]
        if text.__class__ is not str:
            raise UnknownShape("token text")
        if token.get("special") is True:
            text = ""  # an end-of-sequence (or other control) token: generated, never shown
        details = obj.get("details")
        lab = obj.get("latscope")
        if details is None and lab is None and obj.get("generated_text") is None:
            return _new_chunk(Chunk, (_CONTENT, text, 1, None, None, None, None, None, None, 0))
        self.ended = self.ended or details is not None or obj.get("generated_text") is not None
        reason, usage = _details(details)
        sent_ns, extra = lab_stamp(obj)
        return _new_chunk(Chunk, (_CONTENT, text, 1, reason, usage, None, None, sent_ns, extra, 0))


def decode_response_body(body: bytes) -> DecodedResponse:
    """A ``/generate`` answer (``{"generated_text", "details"}``, or a list of one such object), or an error body.
    Raises :class:`StreamDecodeError` when the body is neither."""
    obj = decode_json_object(body, unwrap_single=True)
    if "error" in obj:
        return DecodedResponse(text="", error=api_error_from(obj))
    text = obj.get("generated_text")
    reason, usage = _details(obj.get("details"))
    return DecodedResponse(text=text if isinstance(text, str) else "", finish_reason=reason, usage=usage)


GENERATE = Dialect(
    name=GENERATE_NAME,
    description="Hugging Face TGI's native API (POST /generate_stream at the server root): token ids, logprobs and "
    "details",
    build_request=generate_request,
    framing=Framing.SSE,
    stream_media_types=(SSE_MEDIA_TYPE,),
    new_decoder=TgiStreamDecoder,
    decode_response=decode_response_body,
    decode_error=decode_error_body,
    parse_models=parse_models,
    base_path="",
    models_path=INFO_PATH,
)
"""The TGI native dialect."""
