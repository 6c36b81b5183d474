"""``latscope diagnose [URL]``: the experiment battery against an endpoint, then the ranked findings.

Without URL it starts the embedded lab (``--lab-profile naive``: the four hidden bottlenecks switched on) in a child
process, diagnoses it, and shows how to run the lab tuned and compare.

Exit status: 0 when the diagnosis ran (whatever it found); 2 for usage errors, for a target that cannot be reached or
refuses the request as such (the message names the failed phase), and when no experiment could measure anything
("could not diagnose": every request refused, reset or timed out); 130 when interrupted (Ctrl-C), after writing what
was measured.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from latscope.cli.html import require_html, write_html
from latscope.cli.options import TargetOptions, dialect_option, server_spans_option, span_address, target_options
from latscope.cli.otlp import export_spans, otlp_options, otlp_target
from latscope.diagnose import DiagnoseError, Diagnosis, ProgressEvent, UnknownFindingError, diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.diagnose.plan import diagnosed_ids, select
from latscope.dialects import get_dialect
from latscope.export.spans import Span, spans_of
from latscope.report.diagnosis import diagnosis_report
from latscope.timeline.redact import scrub_data
from latscope.wire.loop import run
from latscope.wire.target import Target

EXIT_USAGE = 2
#: no check reached a verdict: nothing could be measured
EXIT_NOT_DIAGNOSED = 2
EXIT_INTERRUPTED = 130
#: The port ``latscope lab`` listens on by default (see ``latscope lab --help``).
LAB_DEFAULT_PORT = 8088


class _ProgressView:
    """Feeds :class:`ProgressEvent` objects into a rich progress display, one bar per experiment."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, event: ProgressEvent) -> None:
        task = self.tasks.get(event.experiment)
        if event.kind == "experiment":
            self.tasks[event.experiment] = self.progress.add_task(event.experiment, total=event.total)
        elif task is not None and event.kind == "request":
            self.progress.update(task, completed=min(event.done, event.total), total=max(event.total, event.done))
        elif task is not None and event.kind == "done":
            self.progress.update(task, completed=event.total, total=event.total, description=event.experiment)


def _fail(console: Console, message: str) -> NoReturn:
    console.print(Text("error: ", style="bold red") + Text(message))
    sys.exit(EXIT_USAGE)


def _run(console: Console, target: Target, opts: _DiagnoseOptions, *, keep_timelines: bool) -> Diagnosis:
    with Progress(
        TextColumn("[bold]{task.description:<11}"),
        BarColumn(bar_width=30),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        return run(
            diagnose(
                target,
                model=opts.model,
                only=opts.only,
                quick=opts.quick,
                progress=_ProgressView(progress),
                budget_s=opts.budget,
                keep_timelines=keep_timelines,
                direct_url=opts.direct_url,
                server_spans=None if opts.server_spans is None else span_address(opts.server_spans),
            )
        )


def _diagnose(
    console: Console, url: str | None, target: TargetOptions, opts: _DiagnoseOptions, *, keep_timelines: bool
) -> Diagnosis:
    """Diagnose ``url``, or the embedded lab without one; a usage error or a target that cannot be diagnosed exits
    2, Ctrl-C before the first experiment 130."""
    try:
        if url is not None:
            resolved = target.resolve(url, opts.dialect, default_timeouts=REQUEST_TIMEOUTS)
            return _run(console, resolved, opts, keep_timelines=keep_timelines)
        from latscope.lab.process import LabProcess, LabStartError

        console.print(Text(f"Starting the embedded lab (profile {opts.lab_profile}) …", style="dim"))
        try:
            with LabProcess(profile=opts.lab_profile) as lab:
                assert lab.url is not None
                # the lab serves every dialect on its usual path: its origin plus the dialect's base path
                lab_url = lab.url.removesuffix("/v1") + get_dialect(opts.dialect).base_path
                resolved = target.resolve(lab_url, opts.dialect, default_timeouts=REQUEST_TIMEOUTS)
                return _run(console, resolved, opts, keep_timelines=keep_timelines)
        except LabStartError as exc:
            _fail(console, f"the embedded lab did not start: {exc}")
    except DiagnoseError as exc:
        _fail(console, str(exc))
    except KeyboardInterrupt:
        console.print(Text("interrupted before the first experiment: nothing was measured", style="yellow"))
        sys.exit(EXIT_INTERRUPTED)


@dataclass(frozen=True, slots=True)
class _DiagnoseOptions:
    """The diagnosis's own options (the target's are a :class:`~latscope.cli.options.TargetOptions`)."""

    model: str | None
    dialect: str
    only: str | None
    direct_url: str | None
    quick: bool
    json_path: str | None
    html_path: str | None
    lab_profile: str
    budget: float | None
    otlp_url: str | None
    otlp_file: str | None
    server_spans: str | None


def _compare_hint(console: Console, profile: str) -> None:
    other = "tuned" if profile == "naive" else "naive"
    console.print(
        Text.assemble(
            ("\nThat was the embedded lab with the ", "dim"),
            (profile, "bold"),
            (" profile. To compare, run the lab ", "dim"),
            (other, "bold"),
            (" in one terminal and diagnose it from another:\n", "dim"),
            (f"  latscope lab --profile {other}\n", "bold cyan"),
            (f"  latscope diagnose http://127.0.0.1:{LAB_DEFAULT_PORT}/v1\n", "bold cyan"),
        )
    )


@click.command("diagnose", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.argument("url", required=False)
@click.option("--model", "-m", help="Model name (default: the first one the server lists at /models).")
@dialect_option
@target_options(
    timeout_help=f"{REQUEST_TIMEOUTS.connect_s:g} s to connect, {REQUEST_TIMEOUTS.headers_s:g} s for the head, "
    f"{REQUEST_TIMEOUTS.read_s:g} s between reads",
    stamps=False,
)
@click.option(
    "--only",
    metavar="IDS",
    help=f"Comma-separated finding ids to check (runs only the experiments they need): {', '.join(diagnosed_ids())}.",
)
@click.option(
    "--direct",
    "direct_url",
    metavar="UPSTREAM_URL",
    help="The server URL's gateway forwards to, reached directly (its base URL, as URL's): the same requests go "
    "through the gateway and straight to the upstream, in pairs, and the difference is what the gateway (a "
    "protocol conversion, a proxy hop) adds per request and per streamed chunk. Without it gateway-overhead is not "
    "tested.",
)
@click.option("--quick", is_flag=True, help="Smaller experiments: fewer sizes and samples (about a third of the time).")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Write a self-contained HTML report (typical request, findings by cost, other outcomes) to FILE.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the diagnosis as JSON (latscope.diagnosis/1) to FILE ('-': stdout; the report then goes to stderr).",
)
@click.option(
    "--lab-profile",
    type=click.Choice(["naive", "tuned"]),
    default="naive",
    show_default=True,
    help="Without URL: the profile of the embedded lab to diagnose.",
)
@click.option(
    "--budget",
    type=click.FloatRange(min=1.0),
    default=None,
    help="The longest the whole diagnosis may take, seconds: the experiment running then is cut off, later ones are "
    "not tested (default: each experiment has its own bound).",
)
@server_spans_option
@otlp_options
def command(url: str | None, target: TargetOptions, **options: Any) -> None:
    """Run the experiment battery against URL and name the bottlenecks, with their cost and the fix.

    URL is an OpenAI-style base URL (http://host:port/v1; a URL without a path gets /v1, as for
    anthropic.messages and openai.responses), or with --dialect ollama.chat / ollama.generate / tgi.generate the
    server's root (http://host:11434). Without URL, the embedded lab is started with its naive profile and
    diagnosed in the chosen dialect: the out-of-the-box demo.

    \b
    Experiments (each bounded in requests and time):
      baseline     the typical request, TTFT vs prompt length, decode cadence
      connection   DNS lookups, reuse, TLS resumption, ALPN, HTTP/1.1 under concurrency
      parsing      server time vs request body size, against a fast JSON parser
      queueing     a short prompt alone and behind long ones
      streaming    per-read analysis under delayed ACKs and quickack, TTFT vs max_tokens
      overhead     with --direct: the same requests through the gateway and to its upstream, in pairs

    Findings are ranked by measured cost; what could not be tested or decided is listed with the reason.
    --otlp URL / --otlp-file FILE export every experiment request as OpenTelemetry spans; --server-spans receives
    the server's own (vLLM's) and joins them to the requests, in those exports and the JSON's note.
    """
    opts = _DiagnoseOptions(**options)
    require_html(opts.html_path)
    otlp = otlp_target(opts.otlp_url, opts.otlp_file)
    to_stdout = opts.json_path == "-"
    console = Console(stderr=to_stdout)
    try:
        select(opts.only)
    except UnknownFindingError as exc:
        raise click.BadParameter(str(exc), param_hint="--only") from None
    result = _diagnose(console, url, target, opts, keep_timelines=otlp.wanted)
    data = scrub_data(result.to_dict())
    console.print(diagnosis_report(data))
    if url is None:
        _compare_hint(console, opts.lab_profile)
    json_path, html_path = opts.json_path, opts.html_path
    if json_path is not None:
        payload = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
        if to_stdout:
            sys.stdout.buffer.write(payload)
            sys.stdout.flush()
        else:
            with open(json_path, "wb") as fh:
                fh.write(payload)
            console.print(Text(f"wrote {json_path}", style="dim"))
    if html_path is not None:

        def build() -> str:
            from latscope.report.html import diagnosis_html

            return diagnosis_html(data)

        write_html(console, html_path, build)
    if result.timelines:

        def spans() -> list[Span]:
            from latscope.export.otlp import clock_offset

            return spans_of(result.timelines, clock_offset_ns=clock_offset().offset_ns)

        export_spans(console, otlp, spans, "diagnose")
    if result.interrupted:
        console.print(Text("interrupted: the report above is what was measured before Ctrl-C", style="yellow"))
        sys.exit(EXIT_INTERRUPTED)
    if not result.diagnosed:
        reasons = sorted({o.reason for o in result.not_tested})
        console.print(
            Text("error: ", style="bold red")
            + Text("could not diagnose: no experiment could measure anything (" + "; ".join(reasons[:3]) + ")")
        )
        sys.exit(EXIT_NOT_DIAGNOSED)
