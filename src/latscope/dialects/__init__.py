"""Dialects: the wire formats of LLM APIs, as request builders and sans-IO decoders.

:data:`DIALECTS` is the registry and the only way to choose a wire format: the client, ``probe``, ``bench`` and
``diagnose`` look a dialect up by the name a :class:`~latscope.dialects.base.RequestSpec` and a timeline carry
(``"openai.chat"``, ``"ollama.chat"`` …) and take everything from its :class:`~latscope.dialects.base.Dialect`:
request builder, stream framing and media types, stream, body and error decoders, base path and model list.

A new dialect is one module that builds its ``Dialect`` values and one :func:`register_dialect` call here.

Modules: :mod:`~latscope.dialects.base` (the interface), :mod:`~latscope.dialects.openai` (chat, completions),
:mod:`~latscope.dialects.responses` (OpenAI Responses), :mod:`~latscope.dialects.anthropic` (Anthropic Messages),
:mod:`~latscope.dialects.tgi` (TGI's native ``/generate_stream``), :mod:`~latscope.dialects.ollama` (native chat,
generate), :mod:`~latscope.dialects.jsonevents` (the decoder shared by the SSE dialects of typed JSON events),
:mod:`~latscope.dialects.errors` (error bodies, shared by all), :mod:`~latscope.dialects.models` (model lists),
:mod:`~latscope.dialects.prompts` (synthetic prompts).

No dialect is guessed: a server's answer rarely says which API it speaks (an OpenAI-style ``/v1`` server may serve
``/v1/messages`` too), so the caller names one with ``--dialect`` and OpenAI chat is the default.
"""

from __future__ import annotations

from latscope.dialects import anthropic, ollama, openai, responses, tgi
from latscope.dialects.base import Dialect, Framing, RequestBuilder

DIALECTS: dict[str, Dialect] = {}
"""Every known dialect by name, in registration order."""

DEFAULT_DIALECT = openai.CHAT_NAME
"""What every command speaks unless told otherwise: OpenAI chat completions, which most servers serve."""


def register_dialect(dialect: Dialect) -> None:
    """Add (or replace) a dialect in :data:`DIALECTS`."""
    DIALECTS[dialect.name] = dialect


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``; a :class:`KeyError` lists the known names when there is none."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(DIALECTS)}") from None


for _dialect in (
    openai.CHAT,
    openai.COMPLETIONS,
    responses.RESPONSES,
    anthropic.MESSAGES,
    tgi.GENERATE,
    ollama.CHAT,
    ollama.GENERATE,
):
    register_dialect(_dialect)

__all__ = ["DEFAULT_DIALECT", "DIALECTS", "Dialect", "Framing", "RequestBuilder", "get_dialect", "register_dialect"]
