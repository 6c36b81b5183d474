"""Option parsing shared by the subcommands."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from latscope.dialects import DEFAULT_DIALECT, DIALECTS
from latscope.timeline.redact import control_character, register_secret, register_secret_headers

F = TypeVar("F", bound=Callable[..., Any])


def parse_headers(values: Iterable[str]) -> list[tuple[str, str]]:
    """``--header 'Name: value'`` strings → header pairs. Every value is registered as a secret first (a header
    passed by hand may carry a credential under any name), so no message, record or report shows it; a malformed
    one is a :class:`click.BadParameter` naming its position among the ``--header`` options, never its text."""
    out: list[tuple[str, str]] = []
    for number, value in enumerate(values, 1):
        name, sep, rest = value.partition(":")
        register_secret(rest.strip() if sep else value)
        if not sep or not name.strip():
            raise click.BadParameter(
                f"header {number} is not 'Name: value' (it has no name before a ':'; its text is not shown)",
                param_hint="--header",
            )
        found = control_character(rest.strip())
        if found is not None:
            raise click.BadParameter(
                f"the value of header {name.strip()!r} has a {found[1]} at position {found[0]} (not shown)",
                param_hint="--header",
            )
        out.append((name.strip(), rest.strip()))
    register_secret_headers(out, by_hand=True)
    return out


def _checked_api_key(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--api-key``: registered as a secret, and refused (naming the character and its position, never the key)
    when it holds a control character — a key read from a file with CRLF line endings ends in ``\r``."""
    if value is None:
        return None
    register_secret(value)
    found = control_character(value)
    if found is not None:
        position, char = found
        raise click.BadParameter(
            f"the key has a {char} at position {position} of {len(value)} characters; the key is not shown. "
            "Strip it (a file with CRLF line endings leaves one at the end)",
            ctx=ctx,
            param=param,
        )
    return value


def dialect_option(func: F) -> F:
    """The ``--dialect NAME`` option every command that sends generation requests takes (a registry name)."""
    names = list(DIALECTS)
    return click.option(
        "--dialect",
        type=click.Choice(names),
        default=DEFAULT_DIALECT,
        show_default=True,
        help="The API to speak, named (never guessed: one server often serves several): openai.chat (the default), "
        "openai.completions, openai.responses, anthropic.messages (base URL …/v1; the key goes in x-api-key), "
        "tgi.generate, ollama.chat, ollama.generate (native APIs: base URL = the server root). A URL without a path "
        "gets the dialect's.",
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
                callback=_checked_api_key,
                help="Sent as 'Authorization: Bearer KEY' (with --dialect anthropic.messages as 'x-api-key: KEY'); "
                "never printed or saved.",
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
