"""``latscope probe URL``: a few streamed requests, each drawn as a waterfall, and a table comparing them."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, NoReturn

import click
import orjson
from rich.console import Console
from rich.status import Status
from rich.text import Text

from latscope.cli.html import require_html, write_html
from latscope.cli.options import (
    TargetOptions,
    dialect_option,
    pick_dialect,
    server_spans_option,
    span_address,
    target_options,
)
from latscope.cli.otlp import export_spans, otlp_options, otlp_target
from latscope.export.spans import Span, spans_of
from latscope.probe import SCHEMA as PROBE_SCHEMA
from latscope.probe import ProbeError, ProbeResult, probe
from latscope.report.probe import probe_view
from latscope.timeline.model import Phase, Timeline
from latscope.timeline.redact import scrub_data
from latscope.timeline.serialize import timeline_to_dict
from latscope.wire import Timeouts, WireError
from latscope.wire.loop import run
from latscope.wire.pool import BROWSER_CONNECTIONS_PER_HOST
from latscope.wire.target import Target

#: exit statuses: 0 every request completed; 1 some failed; 2 none completed (or the target could not be probed);
#: 130 interrupted (Ctrl-C), after showing and writing what was measured
EXIT_SOME_FAILED = 1
EXIT_UNREACHABLE = 2
EXIT_INTERRUPTED = 130
#: how often the progress line is redrawn while a request runs, s
PROGRESS_TICK_S = 0.25
#: requests a probe sends by default, one after another; and at once with --browser (twice a browser's connections
#: per host, so that half of them wait over HTTP/1.1)
DEFAULT_REQUESTS = 3
BROWSER_REQUESTS = 2 * BROWSER_CONNECTIONS_PER_HOST
#: the probe's limit on every phase of a request, s (``--timeout``): a slow model's first token may take minutes
PROBE_TIMEOUT_S = 120.0
PROBE_TIMEOUTS = Timeouts(
    connect_s=PROBE_TIMEOUT_S,
    tls_s=PROBE_TIMEOUT_S,
    send_s=PROBE_TIMEOUT_S,
    headers_s=PROBE_TIMEOUT_S,
    read_s=PROBE_TIMEOUT_S,
)


class _Waiting:
    """The progress line while a probe runs: which request, the phase it is in, for how long."""

    def __init__(self, status: Status) -> None:
        self.status = status
        self.current: tuple[int, int, Timeline] | None = None

    def __call__(self, index: int, n: int, t: Timeline) -> None:
        self.current = (index, n, t)
        self.tick()

    def tick(self) -> None:
        if self.current is None:
            return
        index, n, t = self.current
        since = (time.monotonic_ns() - t.started_ns) / 1e9 if t.started_ns else 0.0
        phase = _WAITING_FOR.get(t.phase_reached(), str(t.phase_reached()))
        if t.first_token_ns is not None:
            phase = f"streaming ({len(t.events)} events)"
        self.status.update(f"request {index}/{n}: {phase} · {since:.1f} s")


_WAITING_FOR = {
    Phase.POOL: "starting",
    Phase.DNS: "resolving the name",
    Phase.CONNECT: "connecting",
    Phase.TLS: "TLS handshake",
    Phase.SEND: "sending the request",
    Phase.HEADERS: "waiting for the response head",
    Phase.STREAM: "waiting for the first token",
}


async def _with_progress(work: Coroutine[Any, Any, ProbeResult], view: _Waiting) -> ProbeResult:
    """Run the probe while a ticker redraws the progress line."""

    async def ticker() -> None:
        while True:
            await asyncio.sleep(PROGRESS_TICK_S)
            view.tick()

    task = asyncio.create_task(ticker())
    try:
        return await work
    finally:
        task.cancel()


def _fail(console: Console, message: str) -> NoReturn:
    console.print(Text("error: ", style="bold red") + Text(message))
    sys.exit(EXIT_UNREACHABLE)


def _failed_dict(base_url: str, dialect: str, message: str, timeline: Timeline | None) -> dict[str, Any]:
    """The ``--json`` document of a probe that could not start: why, and the model-list request when one was made."""
    return {
        "schema": PROBE_SCHEMA,
        "target": {"base_url": base_url, "dialect": dialect},
        "error": message,
        "models_timeline": None if timeline is None else timeline_to_dict(timeline),
        "requests": [],
    }


def _write_json(console: Console, json_path: str | None, data: dict[str, Any]) -> None:
    """Write ``data`` (scrubbed of secrets) to ``json_path`` ('-': stdout); nothing without a path."""
    if json_path is None:
        return
    payload = orjson.dumps(scrub_data(data), option=orjson.OPT_INDENT_2) + b"\n"
    if json_path == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return
    with open(json_path, "wb") as fh:
        fh.write(payload)
    console.print(Text(f"written to {json_path}", style="dim"))


@click.command("probe", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("url")
@click.option("--model", "-m", help="Model name (default: the first one the server lists at /models).")
@click.option("--prompt", "-p", help="Prompt text (default: a short counting prompt).")
@click.option(
    "--prompt-tokens", type=click.IntRange(min=1), help="Send a synthetic prompt of about this many tokens instead."
)
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True, help="max_tokens per request.")
@click.option(
    "-n", "count", type=click.IntRange(1, 1000), default=None, help="Requests to send (default: 3; 12 with --browser)."
)
@click.option(
    "--browser",
    is_flag=True,
    help=(
        "Send the requests at once through at most 6 connections per host, as a browser's page does: over HTTP/1.1 "
        "the requests beyond 6 wait for a connection (the 'pool' row of their waterfall); over HTTP/2 one "
        "connection carries them all."
    ),
)
@click.option("--http1/--http2", "http1", default=False, help="Offer only HTTP/1.1, or also h2 (default) over TLS.")
@click.option(
    "--http3",
    is_flag=True,
    help=(
        "Send the requests over HTTP/3 (QUIC over UDP, same host and port; needs an https URL and aioquic: pip "
        "install 'latscope[http3]'). The QUIC handshake is the tls row; connect is only the UDP socket."
    ),
)
@click.option(
    "--compare",
    "compare_tcp",
    is_flag=True,
    help="With --http3: send the same requests over TCP+TLS afterwards and show both handshakes and TTFTs.",
)
@dialect_option
@click.option(
    "--completions",
    is_flag=True,
    help="Use /completions instead of /chat/completions (= --dialect openai.completions).",
)
@target_options(timeout_help=f"{PROBE_TIMEOUT_S:g} s")
@click.option("--quickack", is_flag=True, help="Set TCP_QUICKACK before every read (tells Nagle from proxy buffering).")
@click.option(
    "--metrics-url",
    metavar="URL",
    help="Prometheus metrics to scrape before and after the probe (default: the target's origin + /metrics).",
)
@click.option("--no-metrics", is_flag=True, help="Do not scrape the server's Prometheus metrics.")
@click.option(
    "--no-trace-context", is_flag=True, help="Send no W3C traceparent header (some gateways reject unknown headers)."
)
@server_spans_option
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the timelines and derived metrics as JSON to FILE ('-': stdout; the report then goes to stderr).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Write a self-contained HTML report (waterfalls, token arrivals, CDFs) to FILE; it opens offline.",
)
@otlp_options
def command(url: str, target: TargetOptions, **options: Any) -> None:
    """Send a few streamed requests to URL and draw each one's timeline as a waterfall.

    URL is an OpenAI-style base URL (http://host:port/v1; a URL without a path gets /v1, as for
    anthropic.messages and openai.responses), or with --dialect ollama.chat / ollama.generate / tgi.generate the
    server's root (http://host:11434). The dialect is named, never guessed (see --dialect). Each request is shown as
    dns | connect | tls | send | wait | first token | stream, with the connection facts (new or reused, HTTP
    version, ALPN, TLS version and resumption, TCP round-trip time), the token cadence (TTFT, TPOT, inter-token
    latency, events per socket read) and what the server reported about itself. The requests go one after another
    on one connection pool: the first pays for DNS, TCP and TLS, the others show what reuse saves.

    The TTFT is split into client-side time (connection setup, sending), the server-side phases the server reported
    (Server-Timing, llama.cpp timings, the lab's fields: parse, queue, prefill …) and the rest (one network round
    trip, and time nobody reported); the terms add up to the TTFT. The server's Prometheus metrics (vLLM, SGLang,
    TGI, llama.cpp, Triton, the lab) are scraped before and after the probe and summarised when it has them.

    \b
    Examples:
      latscope probe http://127.0.0.1:8000                     # the first model the server lists
      latscope probe https://api.openai.com/v1 -m gpt-4o-mini  # key from OPENAI_API_KEY
      latscope probe http://localhost:8080 -n 5 --prompt-tokens 2000 --max-tokens 16
      latscope probe https://my-gateway/v1 --http1 --quickack --json probe.json
      latscope probe http://gpu-box:8000 --metrics-url http://gpu-box:8000/metrics   # vLLM's metrics
      latscope probe https://api.example/v1 --no-metrics --no-trace-context
      latscope probe http://localhost:11434 --dialect ollama.chat -m llama3.2  # Ollama's native API
      latscope probe https://api.anthropic.com --dialect anthropic.messages -m claude-haiku-4-5  # x-api-key
      latscope probe http://tgi-box:8080 --dialect tgi.generate                # TGI's /generate_stream
      latscope probe http://127.0.0.1:8000 --otlp http://127.0.0.1:4318/v1/traces  # spans to a Collector
      latscope probe http://127.0.0.1:8000 --server-spans   # vLLM's own spans, received on 127.0.0.1:4318
      latscope probe https://my-gateway/v1 --browser --http1   # 12 at once, 6 connections: half wait
      latscope probe https://127.0.0.1:8088/v1 --http3 --compare --ca-file lab-cert.pem  # QUIC beside TCP+TLS

    Exit status: 0 when every request completed, 1 when some failed, 2 when none did (or the model list could not
    be read), 130 when interrupted (Ctrl-C; what was measured is still shown and written).
    """
    opts = _ProbeOptions(**options)
    if opts.prompt is not None and opts.prompt_tokens is not None:
        raise click.UsageError("give --prompt or --prompt-tokens, not both")
    if opts.metrics_url is not None and opts.no_metrics:
        raise click.UsageError("give --metrics-url or --no-metrics, not both")
    if opts.compare_tcp and not opts.http3:
        raise click.UsageError("--compare compares HTTP/3 with TCP+TLS: give --http3 too")
    if opts.server_spans is not None and opts.no_trace_context:
        raise click.UsageError(
            "--server-spans joins spans by the traceparent each request carries: drop --no-trace-context"
        )
    require_html(opts.html_path)
    otlp = otlp_target(opts.otlp_url, opts.otlp_file)
    to_stdout = opts.json_path == "-"
    console = Console(stderr=to_stdout, highlight=False)
    dialect = pick_dialect(opts.dialect, "openai.completions" if opts.completions else None, "--completions")
    if opts.http3 and not url.lower().startswith("https://"):
        raise click.UsageError("--http3 needs an https:// URL: QUIC always encrypts")
    resolved = target.resolve(
        url,
        dialect,
        default_timeouts=PROBE_TIMEOUTS,
        http2=not opts.http1,
        http3=opts.http3,
        trace_context=not opts.no_trace_context,
    )
    result = _probe(console, resolved, opts)
    console.print(probe_view(result))
    _write_json(console, opts.json_path, result.to_dict())
    if opts.html_path is not None and result.timelines:

        def build() -> str:
            from latscope.report.html import probe_html

            return probe_html(result.timelines, target=result.base_url, model=result.model, dialect=result.dialect)

        write_html(console, opts.html_path, build)
    if result.timelines:

        def spans() -> list[Span]:
            from latscope.export.otlp import clock_offset

            return spans_of(result.timelines, clock_offset_ns=clock_offset().offset_ns)

        export_spans(console, otlp, spans, "probe")
    _exit(console, result)


@dataclass(frozen=True, slots=True)
class _ProbeOptions:
    """The probe's own options (the target's are a :class:`~latscope.cli.options.TargetOptions`)."""

    model: str | None
    prompt: str | None
    prompt_tokens: int | None
    max_tokens: int
    count: int | None
    browser: bool
    http1: bool
    http3: bool
    compare_tcp: bool
    dialect: str
    completions: bool
    quickack: bool
    metrics_url: str | None
    no_metrics: bool
    no_trace_context: bool
    server_spans: str | None
    json_path: str | None
    html_path: str | None
    otlp_url: str | None
    otlp_file: str | None


def _probe(console: Console, target: Target, opts: _ProbeOptions) -> ProbeResult:
    """Run the probe with a progress line; a probe that could not start writes its ``--json`` and exits 2."""
    status = console.status("starting", spinner="dots")
    view = _Waiting(status)
    n = opts.count if opts.count is not None else BROWSER_REQUESTS if opts.browser else DEFAULT_REQUESTS
    try:
        with status:
            return run(
                _with_progress(
                    probe(
                        target,
                        model=opts.model,
                        prompt=opts.prompt,
                        prompt_tokens=opts.prompt_tokens,
                        max_tokens=opts.max_tokens,
                        n=n,
                        browser=opts.browser,
                        compare_tcp=opts.compare_tcp,
                        quickack=opts.quickack,
                        metrics_url=opts.metrics_url,
                        scrape_metrics=not opts.no_metrics,
                        on_request=view,
                        server_spans=None if opts.server_spans is None else span_address(opts.server_spans),
                    ),
                    view,
                )
            )
    except WireError as exc:
        where = target.base_url + target.dialect.models_path
        message = f"could not list the models at {where}: {exc.phase} failed: {exc}"
        _write_json(console, opts.json_path, _failed_dict(target.base_url, target.dialect.name, message, exc.timeline))
        _fail(console, message)
    except ProbeError as exc:
        _write_json(console, opts.json_path, _failed_dict(target.base_url, target.dialect.name, str(exc), exc.timeline))
        _fail(console, str(exc))
    except KeyboardInterrupt:
        console.print(Text("interrupted before the first request: nothing was measured", style="yellow"))
        sys.exit(EXIT_INTERRUPTED)


def _exit(console: Console, result: ProbeResult) -> None:
    """Exit with the probe's status: 130 interrupted, 2 none completed, 1 some failed, else return (0)."""
    if result.interrupted:
        console.print(Text(f"interrupted after {len(result.timelines)} request(s)", style="yellow"))
        sys.exit(EXIT_INTERRUPTED)
    if not any(t.ok for t in result.timelines):
        first = next((t.error for t in result.timelines if t.error is not None), None)
        if first is not None:
            unreachable = first.phase in (Phase.DNS, Phase.CONNECT, Phase.TLS)
            what = "cannot reach the target" if unreachable else "every request failed"
            _fail(console, f"{what}: {first.phase} failed: {first.message}")
        sys.exit(EXIT_UNREACHABLE)
    if not result.ok:
        sys.exit(EXIT_SOME_FAILED)
