"""What every dialect provides: a request builder and a sans-IO stream decoder.

A dialect knows one API's wire format. The client (``latscope.wire``) hands the decoder the response *body* bytes
(HTTP framing already removed) as they arrive, and records what comes out into the timeline. Decoders never see
sockets or clocks: they are fed bytes and return :class:`Chunk` objects, so they are tested with byte fixtures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol, TypedDict, Unpack, overload

import orjson

from latscope.timeline.model import EventKind, Usage

EXCERPT_CHARS = 80
"""How much of an undecodable event or body an error message quotes."""


class StreamDecodeError(ValueError):
    """The response body could not be decoded; the message names the event and the byte offset."""


class EventDecodeError(StreamDecodeError):
    """An event of the stream could not be decoded (invalid JSON). ``chunks`` are the events of the same feed that
    were decoded before it, in order: they arrived intact, so the caller records them before failing the stream
    (the wire client's ``Exchange`` does)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.chunks: list[Chunk] = []  #: set by the decoder's ``feed`` on the way out


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error object the server sent (as the body of a 4xx/5xx, or inside the stream)."""

    message: str
    type: str | None = None
    code: str | int | None = None
    param: str | None = None


class Chunk(NamedTuple):
    """One decoded stream event. ``kind`` is the primary meaning; the optional fields carry what came with it.

    A single event may carry several things (a finish chunk with ``usage`` attached, a content chunk with
    ``timings``): ``kind`` is the most token-relevant one (content > reasoning > tool call > finish > usage > role)
    and the other fields are filled regardless.
    """

    kind: EventKind
    text: str = ""  #: token text (content or reasoning); "" when none
    tokens: int = 0  #: tokens carried (1 for a chunk with text unless the dialect knows better)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None  #: llama.cpp-style ``timings`` object, as sent
    error: ApiError | None = None
    server_sent_ns: int | None = None  #: lab ``--truth`` send stamp (``latscope.sent_ns``), when present
    extra: dict[str, Any] | None = None  #: other server-reported fields worth keeping (lab ``latscope`` object …)
    choice: int = 0  #: the choice (``n > 1``) or output item the event belongs to; 0 for a single answer


_new_chunk = tuple.__new__


class TextRun(Sequence[Chunk]):
    """Several events that differ only in their text: one token each, of one ``kind``, ``finish_reason`` and
    ``choice``, nothing else attached. What a decoder's template path returns for a read of a fast stream (hundreds
    of events): it reads as the :class:`Chunk` of each event (made when asked for), and the client records it
    column by column without making any (:class:`~latscope.timeline.model.EventLog`).
    """

    __slots__ = ("choice", "finish_reason", "kind", "texts")

    def __init__(self, kind: EventKind, texts: list[str], finish_reason: str | None = None, choice: int = 0) -> None:
        self.kind = kind
        self.texts = texts  #: each event's text, in order
        self.finish_reason = finish_reason
        self.choice = choice

    def _chunk(self, text: str) -> Chunk:
        return _new_chunk(Chunk, (self.kind, text, 1, self.finish_reason, None, None, None, None, None, self.choice))

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, index: int) -> Chunk: ...

    @overload
    def __getitem__(self, index: slice) -> list[Chunk]: ...

    def __getitem__(self, index: int | slice) -> Chunk | list[Chunk]:
        if isinstance(index, slice):
            return [self._chunk(text) for text in self.texts[index]]
        return self._chunk(self.texts[index])

    def __iter__(self) -> Iterator[Chunk]:
        return map(self._chunk, self.texts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by content, like a list

    def __repr__(self) -> str:
        return f"TextRun({list(self)!r})"


class StreamDecoder(Protocol):
    """Incremental decoder of one response body."""

    def feed(self, data: bytes) -> Sequence[Chunk]:
        """Consume the next body bytes; return the events they completed (possibly none): a list, or a
        :class:`TextRun` for events that differ only in their text."""
        ...

    def close(self) -> list[Chunk]:
        """The body ended: return any final events. ``warnings`` says what was odd (e.g. no ``[DONE]``)."""
        ...

    @property
    def warnings(self) -> list[str]:
        """Non-fatal oddities seen so far (unknown shapes, stream ended without ``[DONE]`` …)."""
        ...


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What to send: method, path (relative to the base URL, e.g. ``/chat/completions``), headers and JSON body.

    ``model``, ``max_tokens`` and ``stream`` are the request's intent as the builder that made it knows it (the
    client records them on the request's timeline); ``stream`` None for a spec built by hand, whose body the client
    then reads for ``"stream": true``.
    """

    method: str
    path: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    dialect: str = ""  #: e.g. "openai.chat"
    model: str | None = None
    max_tokens: int | None = None  #: the generation limit the body asks for, None when it leaves it to the server
    stream: bool | None = None


@dataclass(frozen=True, slots=True)
class DecodedResponse:
    """A non-streamed response body, decoded: what a dialect's ``decode_response_body`` returns."""

    text: str  #: the generated text ("" when none)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None  #: llama.cpp-style ``timings`` object, as sent
    reasoning: str = ""  #: reasoning text (``reasoning_content`` / ``reasoning``), "" when none
    error: ApiError | None = None  #: an error object sent instead of a result (some proxies answer 200 with one)


Prompt = str | Sequence[Mapping[str, object]] | Sequence[int]
"""What a generation request carries: prompt text, a chat ``messages`` list, or token ids. Each builder takes the
forms its API can send and raises :class:`ValueError` naming the form it needs for the others."""


def refuse_ignore_eos(options: GenerationOptions, dialect: str, api: str) -> None:
    """Raise :class:`ValueError` when ``options`` ask for ``ignore_eos`` of an ``api`` that has no such switch."""
    if options.get("ignore_eos"):
        raise ValueError(f"{dialect}: {api} has no ignore_eos; the output length is up to the model")


def json_request(
    path: str,
    body: dict[str, object],
    *,
    dialect: str,
    model: str,
    max_tokens: int | None,
    stream: bool,
    headers: Sequence[tuple[str, str]] = (),
) -> RequestSpec:
    """A ``POST`` of ``body`` as JSON to ``path``: ``content-type: application/json``, then ``headers``."""
    return RequestSpec(
        method="POST",
        path=path,
        body=orjson.dumps(body),
        headers=[("content-type", "application/json"), *headers],
        dialect=dialect,
        model=model,
        max_tokens=max_tokens,
        stream=stream,
    )


def prompt_messages(prompt: Prompt, dialect: str) -> list[dict[str, object]]:
    """``prompt`` as a chat ``messages`` list: text becomes one user message. Token ids raise :class:`ValueError`."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = [dict(item) for item in prompt if isinstance(item, Mapping)]
    if len(messages) != len(prompt):
        raise ValueError(f"{dialect} takes prompt text or a 'messages' list, not token ids")
    return messages


def prompt_text(prompt: Prompt, dialect: str, *, token_ids: bool = False) -> str | list[int]:
    """``prompt`` as text (or, with ``token_ids``, a list of token ids). A ``messages`` list raises
    :class:`ValueError`: an API without chat turns needs a 'prompt'."""
    if isinstance(prompt, str):
        return prompt
    ids = [item for item in prompt if isinstance(item, int) and not isinstance(item, bool)]
    if token_ids and len(ids) == len(prompt):
        return ids
    raise ValueError(f"{dialect} needs 'prompt' text, not 'messages'")


ErrorBodyDecoder = Callable[[int, bytes, str | None], ApiError]
"""Decodes an error body: ``(status, body, content_type) -> ApiError``; never raises."""

ResponseBodyDecoder = Callable[[bytes], DecodedResponse]
"""Decodes a non-streamed 2xx body; raises :class:`StreamDecodeError` when it is not the dialect's shape."""


class GenerationOptions(TypedDict, total=False):
    """The options every :class:`RequestBuilder` takes, all optional.

    ``stream`` (default True) asks for a streamed answer; ``include_usage`` (default True) asks a streamed answer
    for its token counts where the API needs asking; ``temperature`` and ``seed`` are sent when given;
    ``ignore_eos`` makes the server generate exactly ``max_tokens`` tokens (an extension of vLLM, SGLang and
    llama.cpp; a dialect whose API has no such switch raises :class:`ValueError`); ``extra`` fields are merged into
    the body's top level last (they win).
    """

    stream: bool
    include_usage: bool
    temperature: float | None
    seed: int | None
    ignore_eos: bool
    extra: Mapping[str, object] | None


class RequestBuilder(Protocol):
    """Builds one generation request: ``(model, prompt, max_tokens, **options) -> RequestSpec``.

    ``prompt`` is a :data:`Prompt`: text, a chat ``messages`` list or token ids, as far as the API takes them.
    ``max_tokens`` None leaves the output limit to the server; the options are :class:`GenerationOptions`.
    """

    def __call__(
        self, model: str, prompt: Prompt, max_tokens: int | None, /, **options: Unpack[GenerationOptions]
    ) -> RequestSpec: ...


SSE_MEDIA_TYPE = "text/event-stream"
"""The Content-Type of a Server-Sent Events stream (WHATWG HTML §9.2)."""


class Framing(StrEnum):
    """How a dialect's stream divides into events."""

    SSE = "sse"  #: Server-Sent Events (WHATWG HTML §9.2): ``data:`` lines, a blank line ends an event
    NDJSON = "ndjson"  #: newline-delimited JSON: one object per line

    @property
    def description(self) -> str:
        """What the framing is called in messages ("an event stream", "an NDJSON stream")."""
        return "an event stream" if self is Framing.SSE else "an NDJSON stream"


def bearer_credentials(api_key: str) -> list[tuple[str, str]]:
    """``Authorization: Bearer KEY``: how OpenAI-style APIs (and Ollama, TGI behind a gateway) take a key."""
    return [("Authorization", f"Bearer {api_key}")]


CredentialHeaders = Callable[[str], list[tuple[str, str]]]
"""The request headers that carry an API key, ``api_key -> [(name, value)]``. The key is never altered; every
header it goes into has a name :func:`latscope.timeline.redact.is_secret_header` redacts."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """Everything latscope needs to speak one API: how to build its requests and where they go, how its stream is
    framed and decoded, how its bodies and its errors read, and where it lists its models.

    ``base_path`` is what a base URL given without a path gets (``/v1`` for OpenAI-style servers, nothing for
    Ollama's native API at the server root); request paths and ``models_path`` are relative to the base URL.
    ``stream_media_types`` are the Content-Types a streamed response may carry (the first is what the client asks
    for in ``Accept``); a streamed request answered with anything else fails, naming the type.
    """

    name: str  #: registry key, also ``RequestSpec.dialect`` and ``Timeline.dialect``
    description: str  #: one line for ``--help``: the API and the servers that speak it
    build_request: RequestBuilder
    framing: Framing
    stream_media_types: tuple[str, ...]
    #: a fresh stream decoder for one response body (keyword ``limits``: its :class:`~latscope.sse.limits.StreamLimits`)
    new_decoder: Callable[..., StreamDecoder]
    decode_response: ResponseBodyDecoder  #: a non-streamed response body
    decode_error: ErrorBodyDecoder  #: ``(status, body, content_type)``; never raises
    parse_models: Callable[[bytes], list[str]]  #: the model ids of a ``models_path`` response
    base_path: str = "/v1"
    models_path: str = "/models"
    credential_headers: CredentialHeaders = bearer_credentials  #: where ``--api-key`` goes

    @property
    def mode(self) -> str:
        """The part of the name after the API family: ``chat``, ``completions``, ``generate``."""
        return self.name.partition(".")[2] or self.name

    def accepts_stream_type(self, media_type: str | None) -> bool:
        """True when a streamed response of this (lower-case, parameter-free) media type is this dialect's stream."""
        return media_type in self.stream_media_types


def decode_json_object(body: bytes, *, unwrap_single: bool = False) -> dict[str, Any]:
    """A non-streamed body as the JSON object it holds (with ``unwrap_single``, a list of one object is that
    object). Raises :class:`StreamDecodeError` when the body is not valid JSON or not an object."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StreamDecodeError(f"the response body is not valid JSON ({exc}): {excerpt(body)}") from None
    if unwrap_single and isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, dict):
        raise StreamDecodeError(f"the response body is not a JSON object: {excerpt(body)}")
    return obj


def as_text(value: object) -> str:
    """``value`` when it is a string, else ""."""
    return value if isinstance(value, str) else ""


def excerpt(data: str | bytes, limit: int = EXCERPT_CHARS) -> str:
    """A short quotation of ``data`` for messages."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:limit]) + ("…" if len(text) > limit else "")
