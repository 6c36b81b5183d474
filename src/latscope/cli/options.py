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


def target_options(func: F) -> F:
    """How to reach the target, the same on every command: ``--api-key`` (or ``OPENAI_API_KEY``), ``--insecure``,
    ``--ca-file`` and ``--header`` (parameters ``api_key``, ``insecure``, ``ca_file``, ``header``)."""
    for option in reversed(
        (
            click.option(
                "--api-key",
                envvar="OPENAI_API_KEY",
                show_envvar=True,
                help="Sent as 'Authorization: Bearer KEY'; never printed or saved.",
            ),
            click.option("--insecure", "-k", is_flag=True, help="Do not verify the server's TLS certificate."),
            click.option(
                "--ca-file", type=click.Path(exists=True, dir_okay=False), help="Extra CA certificates (PEM) to trust."
            ),
            click.option(
                "--header", "-H", "header", multiple=True, metavar="'NAME: VALUE'", help="Extra request header; repeat."
            ),
        )
    ):
        func = option(func)
    return func
