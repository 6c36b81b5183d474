"""``--otlp URL`` and ``--otlp-file FILE``: the request timelines as OpenTelemetry spans (:mod:`latscope.export`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from latscope.export.otlp import MISSING_OTEL, OtlpExportError, OtlpTarget, otel_available
from latscope.export.spans import Span

F = TypeVar("F", bound=Callable[..., Any])


def otlp_options(func: F) -> F:
    """``--otlp URL`` and ``--otlp-file FILE``."""
    func = click.option(
        "--otlp-file",
        "otlp_file",
        type=click.Path(dir_okay=False),
        help="Write each request as OpenTelemetry spans (a span per request, a child per phase) to FILE: OTLP JSON, "
        "one ExportTraceServiceRequest per line (what the Collector's otlpjsonfile receiver reads).",
    )(func)
    func = click.option(
        "--otlp",
        "otlp_url",
        metavar="URL",
        help="Send each request as OpenTelemetry spans over OTLP/HTTP (protobuf) to URL, e.g. "
        "http://127.0.0.1:4318/v1/traces; a request's span is the traceparent it sent, so the server's spans join it.",
    )(func)
    return func


def otlp_target(url: str | None, file: str | None) -> OtlpTarget:
    """The destination the options name, checked before anything is sent: the extra is installed, the URL is
    http(s), the file's directory exists."""
    target = OtlpTarget(url=url, file=file)
    if not target.wanted:
        return target
    if not otel_available():
        raise click.UsageError(MISSING_OTEL)
    if url is not None and not url.lower().startswith(("http://", "https://")):
        raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint="--otlp")
    if file is not None and not Path(file).parent.is_dir():
        raise click.UsageError(f"--otlp-file {file}: the directory {Path(file).parent} does not exist")
    return target


def export_spans(console: Console, target: OtlpTarget, build: Callable[[], Sequence[Span]], command: str) -> bool:
    """Build the spans and deliver them; say where, or why not. A failed export is reported, not raised: what the
    command measured is already shown and written. Returns True when every destination took them."""
    if not target.wanted:
        return True
    try:
        for line in target.export(build(), command=command):
            console.print(Text(line, style="dim"))
    except (OtlpExportError, OSError) as exc:
        console.print(Text("error: ", style="bold red") + Text(f"OpenTelemetry export failed: {exc}"))
        return False
    return True
