"""Option parsing shared by the subcommands."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import click

from latscope.dialects import DEFAULT_DIALECT, DIALECTS
from latscope.load.config import BenchConfigError, parse_duration_s
from latscope.timeline.redact import control_character, register_secret, register_secret_headers
from latscope.wire import Timeouts
from latscope.wire.kstamps import DEFAULT_STAMPS, STAMP_CHOICES
from latscope.wire.target import Target, TargetError

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


@dataclass(frozen=True, slots=True)
class TargetOptions:
    """What the target options said, checked but not yet resolved: :meth:`resolve` makes the
    :class:`~latscope.wire.target.Target` once the URL (and the dialect) is known. ``timeout_s`` bounds every phase
    of a request (connect, TLS, send, the wait for the head, each gap between reads), ``max_time_s`` the whole
    request, both s; None leaves the command's defaults."""

    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    verify: bool = True
    ca_file: str | None = None
    timeout_s: float | None = None
    max_time_s: float | None = None
    stamps: str = DEFAULT_STAMPS

    def timeouts(self, default: Timeouts) -> Timeouts:
        """``default`` with ``--timeout`` on every phase and ``--max-time`` on the whole request, where given."""
        out = default
        if self.timeout_s is not None:
            s = self.timeout_s
            out = dataclasses.replace(out, connect_s=s, tls_s=s, send_s=s, headers_s=s, read_s=s)
        if self.max_time_s is not None:
            out = dataclasses.replace(out, total_s=self.max_time_s)
        return out

    def resolve(self, url: str, dialect: str, *, default_timeouts: Timeouts = Timeouts(), **settings: Any) -> Target:  # noqa: B008 - frozen
        """The :class:`~latscope.wire.target.Target` at ``url`` in ``dialect``; ``settings`` are its other fields
        (``http2``, ``http3``, ``trace_context`` …). A URL that is not http(s) is a :class:`click.BadParameter`."""
        try:
            return Target.resolve(
                url,
                dialect=dialect,
                api_key=self.api_key,
                headers=self.headers,
                verify=self.verify,
                ca_file=self.ca_file,
                timeouts=self.timeouts(default_timeouts),
                stamps=self.stamps,
                **settings,
            )
        except TargetError as exc:
            raise click.BadParameter(str(exc), param_hint="URL") from None


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A duration option: ``30``, ``30s``, ``500ms``, ``2m`` (bare numbers are seconds) → s."""
    if value is None:
        return None
    try:
        seconds = parse_duration_s(value)
    except BenchConfigError:
        raise click.BadParameter(f"cannot read {value!r}; write e.g. 30, 30s, 2m or 500ms", ctx, param) from None
    if seconds < 0.1:
        raise click.BadParameter(f"{value!r} is under the least, 0.1 s", ctx, param)
    return seconds


_TARGET_PARAMS = ("api_key", "insecure", "ca_file", "header", "timeout", "max_time", "stamps")


def target_options(*, timeout_help: str, stamps: bool = True) -> Callable[[F], F]:
    """How to reach the target, the same on every command: ``--api-key`` (or ``OPENAI_API_KEY``), ``--insecure``,
    ``--ca-file``, ``--header``, ``--timeout``, ``--max-time`` and (with ``stamps``) ``--stamps``. The command
    receives them as one :class:`TargetOptions` in its ``target`` parameter. ``timeout_help`` names the command's
    default limits."""
    options = [
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
        click.option(
            "--timeout",
            callback=_duration,
            metavar="DURATION",
            help="The longest each phase of a request may take: connect, TLS, send, the wait for the head, each gap "
            f"between reads (30, 30s, 500ms, 2m; default: {timeout_help}).",
        ),
        click.option(
            "--max-time",
            callback=_duration,
            metavar="DURATION",
            help="The longest one request may take, as curl's --max-time (60, 60s, 2m; default: no limit beyond "
            "--timeout).",
        ),
    ]
    if stamps:
        options.append(
            click.option(
                "--stamps",
                type=click.Choice(STAMP_CHOICES),
                default=DEFAULT_STAMPS,
                show_default=True,
                help="What stamps each read: 'kernel' uses the kernel's receive stamps (Linux SO_TIMESTAMPNS; each "
                "read keeps its user-space stamp too, and their difference, the client's own scheduling delay, is "
                "recorded), 'user' stamps a read when the event loop hands it over.",
            )
        )

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def gather(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name, None) for name in _TARGET_PARAMS}
            kwargs["target"] = TargetOptions(
                api_key=values["api_key"],
                headers=tuple(parse_headers(values["header"] or ())),
                verify=not values["insecure"],
                ca_file=values["ca_file"],
                timeout_s=values["timeout"],
                max_time_s=values["max_time"],
                stamps=values["stamps"] or DEFAULT_STAMPS,
            )
            return func(*args, **kwargs)

        wrapped: Any = gather
        for option in reversed(options):
            wrapped = option(wrapped)
        return cast(F, wrapped)

    return decorate


#: ``--server-spans`` without a value: OTLP/HTTP's default port, on loopback.
DEFAULT_SPAN_ADDRESS = "127.0.0.1:4318"


def server_spans_option(command: F) -> F:
    """``--server-spans [[HOST:]PORT]``: receive the server's own OTLP spans for the run and join each request's."""
    return click.option(
        "--server-spans",
        metavar="[HOST:]PORT",
        is_flag=False,
        flag_value=DEFAULT_SPAN_ADDRESS,
        default=None,
        help="Receive the server's own trace spans over OTLP/HTTP for the run (default 127.0.0.1:4318) and join each "
        "request's to it: vLLM's ingest, queue, prefill and decode per request (start vLLM with "
        "--otlp-traces-endpoint http://HOST:PORT/v1/traces and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf).",
    )(command)


def span_address(value: str) -> tuple[str, int]:
    """``--server-spans``'s ``[HOST:]PORT`` as (host, port); the host defaults to 127.0.0.1 (loopback: only this
    machine's servers can post spans to it)."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not [HOST:]PORT (a port from 0 to 65535)", param_hint="--server-spans")
    return host, int(port)
