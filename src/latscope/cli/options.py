"""Option parsing shared by the subcommands."""

from __future__ import annotations

from collections.abc import Iterable

import click


def parse_headers(values: Iterable[str]) -> list[tuple[str, str]]:
    """``--header 'Name: value'`` strings → header pairs (:class:`click.BadParameter` naming a malformed one)."""
    out: list[tuple[str, str]] = []
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected 'Name: value', got {value!r}", param_hint="--header")
        out.append((name.strip(), rest.strip()))
    return out
