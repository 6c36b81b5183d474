"""Option parsing shared by the subcommands."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from latscope.dialects import DEFAULT_DIALECT, DIALECTS

F = TypeVar("F", bound=Callable[..., Any])


def parse_headers(values: Iterable[str]) -> list[tuple[str, str]]:
    """``--header 'Name: value'`` strings → header pairs (:class:`click.BadParameter` naming a malformed one)."""
    out: list[tuple[str, str]] = []
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected 'Name: value', got {value!r}", param_hint="--header")
        out.append((name.strip(), rest.strip()))
    return out


def dialect_option(func: F) -> F:
    """The ``--dialect NAME`` option every command that sends generation requests takes (a registry name)."""
    names = list(DIALECTS)
    return click.option(
        "--dialect",
        type=click.Choice(names),
        default=DEFAULT_DIALECT,
        show_default=True,
        help="The API to speak: openai.chat, openai.completions (OpenAI-style, base URL …/v1), ollama.chat, "
        "ollama.generate (Ollama's native API, base URL = the server root).",
    )(func)


def pick_dialect(dialect: str, alias: str | None, alias_option: str) -> str:
    """``--dialect``, or the dialect an older option names (``alias``: ``--completions``, ``--api``); a
    :class:`click.UsageError` when both are given and disagree."""
    if alias is None or alias == dialect:
        return dialect
    if dialect != DEFAULT_DIALECT:
        raise click.UsageError(f"{alias_option} means --dialect {alias}; drop one of them")
    return alias
