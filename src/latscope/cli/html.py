"""``--html FILE``: write a self-contained HTML report, or say how to get the plotting library it needs."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

#: What to tell a user whose installation lacks the HTML extra.
MISSING_HTML = (
    "--html needs the plotting library bokeh, which is not installed; install the extra: pip install 'latscope[html]'"
)


def require_html(path: str | None) -> None:
    """Fail early (before a long run) when ``--html`` was asked for and bokeh is missing, or the file's directory
    does not exist."""
    if path is None:
        return
    if importlib.util.find_spec("bokeh") is None:
        raise click.UsageError(MISSING_HTML)
    folder = Path(path).parent
    if not folder.is_dir():
        raise click.UsageError(f"--html {path}: the directory {folder} does not exist")


def write_html(console: Console, path: str, build: Callable[[], str]) -> None:
    """Build the page (``build`` imports the renderer) and write it to ``path``; say where and how large."""
    try:
        page = build()
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "bokeh":
            raise click.ClickException(MISSING_HTML) from None
        raise
    data = page.encode("utf-8")
    Path(path).write_bytes(data)
    console.print(Text(f"wrote {path} ({len(data) / 1e6:.1f} MB, opens offline)", style="dim"))
