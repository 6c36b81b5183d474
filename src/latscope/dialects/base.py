"""What every dialect provides: a request builder and a sans-IO stream decoder.

A dialect knows one API's wire format. The client (``latscope.wire``) hands the decoder the response *body* bytes
(HTTP framing already removed) as they arrive, and records what comes out into the timeline. Decoders never see
sockets or clocks: they are fed bytes and return :class:`Chunk` objects, so they are tested with byte fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from latscope.timeline.model import EventKind, Usage


class StreamDecodeError(ValueError):
    """The response body could not be decoded; the message names the event and the byte offset."""


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
    ``timings``): ``kind`` is the most token-relevant one (content > reasoning > finish > usage > role) and the other
    fields are filled regardless.
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


class StreamDecoder(Protocol):
    """Incremental decoder of one response body."""

    def feed(self, data: bytes) -> list[Chunk]:
        """Consume the next body bytes; return the events they completed (possibly none)."""
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
    """What to send: method, path (relative to the base URL, e.g. ``/chat/completions``), headers and JSON body."""

    method: str
    path: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    dialect: str = ""  #: e.g. "openai.chat"
    model: str | None = None


@dataclass(frozen=True, slots=True)
class DecodedResponse:
    """A non-streamed response body, decoded: what a dialect's ``decode_response_body`` returns."""

    text: str  #: the generated text ("" when none)
    finish_reason: str | None = None
    usage: Usage | None = None
    timings: dict[str, Any] | None = None  #: llama.cpp-style ``timings`` object, as sent
    reasoning: str = ""  #: reasoning text (``reasoning_content`` / ``reasoning``), "" when none
    error: ApiError | None = None  #: an error object sent instead of a result (some proxies answer 200 with one)
