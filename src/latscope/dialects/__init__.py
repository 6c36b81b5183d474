"""Dialects: the wire formats of LLM APIs, as request builders and sans-IO decoders.

:data:`DIALECTS` is the registry, keyed by the name a :class:`~latscope.dialects.base.RequestSpec` and a timeline
carry (``"openai.chat"``, ``"openai.completions"``). A new dialect (Ollama, TGI, Anthropic …) is one module with the
same four callables and one :func:`register_dialect` call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from latscope.dialects import openai
from latscope.dialects.base import ApiError, DecodedResponse, RequestSpec, StreamDecoder


class RequestBuilder(Protocol):
    """Builds one generation request: ``(model, prompt text, max_tokens, *, options) -> RequestSpec``.

    ``max_tokens`` None leaves the output limit to the server; the options are those of
    :func:`latscope.dialects.openai.chat_request`.
    """

    def __call__(
        self,
        model: str,
        prompt: str,
        max_tokens: int | None,
        /,
        *,
        stream: bool = ...,
        include_usage: bool = ...,
        temperature: float | None = ...,
        seed: int | None = ...,
        ignore_eos: bool = ...,
        extra: Mapping[str, object] | None = ...,
    ) -> RequestSpec: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """What latscope needs to speak one API: build a request, decode its stream, its body and its errors."""

    name: str  #: registry key, also ``RequestSpec.dialect`` and ``Timeline.dialect``
    build_request: RequestBuilder
    new_decoder: Callable[[], StreamDecoder]  #: a fresh stream decoder for one response body
    decode_response: Callable[[bytes], DecodedResponse]  #: a non-streamed response body
    decode_error: Callable[[int, bytes, str | None], ApiError]  #: ``(status, body, content_type)``; never raises


DIALECTS: dict[str, Dialect] = {}
"""Every known dialect by name."""


def register_dialect(dialect: Dialect) -> None:
    """Add (or replace) a dialect in :data:`DIALECTS`."""
    DIALECTS[dialect.name] = dialect


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``; a :class:`KeyError` lists the known names when there is none."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(sorted(DIALECTS))}") from None


register_dialect(
    Dialect(
        name="openai.chat",
        build_request=openai.chat_request,
        new_decoder=partial(openai.OpenAIStreamDecoder, "chat"),
        decode_response=partial(openai.decode_response_body, mode="chat"),
        decode_error=openai.decode_error_body,
    )
)
register_dialect(
    Dialect(
        name="openai.completions",
        build_request=openai.completions_request,
        new_decoder=partial(openai.OpenAIStreamDecoder, "completions"),
        decode_response=partial(openai.decode_response_body, mode="completions"),
        decode_error=openai.decode_error_body,
    )
)

__all__ = ["DIALECTS", "Dialect", "RequestBuilder", "get_dialect", "register_dialect"]
