"""``latscope bench URL``: load-test an OpenAI-compatible endpoint and save a run directory."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console

from latscope.cli.html import require_html, write_html
from latscope.cli.options import TargetOptions, dialect_option, pick_dialect, target_options
from latscope.cli.otlp import export_spans, otlp_options, otlp_target
from latscope.dialects import DEFAULT_DIALECT
from latscope.export.spans import Span
from latscope.load.arrivals import ArrivalSpecError, ClosedLoop, InterArrival, OpenLoop, parse_numbers
from latscope.load.config import (
    BenchConfig,
    BenchConfigError,
    parse_duration_s,
    parse_warmup,
)
from latscope.load.lengths import LengthSpecError, parse_length
from latscope.load.slo import SloSpecError, parse_slo
from latscope.load.stamps import describe as describe_stamps
from latscope.load.workload import Workload, WorkloadSpecError, parse_class
from latscope.timeline.redact import scrub_data
from latscope.wire import Timeouts
from latscope.wire.retry import DEFAULT_BACKOFF_S, DEFAULT_MAX_WAIT_S
from latscope.wire.target import Target

if TYPE_CHECKING:
    from latscope.load.bench import RunResult
    from latscope.load.summary import StepSummary

#: every measured request failed
EXIT_ALL_FAILED = 2

_SPEC_ERRORS = (ArrivalSpecError, BenchConfigError, LengthSpecError, SloSpecError, WorkloadSpecError)


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """The bench command's own options as given (the target's are a :class:`~latscope.cli.options.TargetOptions`);
    :func:`build_config` reads them."""

    model: str | None = None
    dialect: str = DEFAULT_DIALECT
    api: str | None = None
    concurrency: str | None = None
    rate: str | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    requests: int | None = None
    duration: str | None = None
    warmup: str | None = None
    prompt_tokens: str = "256"
    output_tokens: str = "128"
    ignore_eos: bool = False
    classes: tuple[str, ...] = ()
    prompts: str | None = None
    seed: int = 0
    slo: str | None = None
    workers: str = "auto"
    http2: bool = True
    no_reuse: bool = False
    temperature: float | None = None
    drain: str | None = None
    spin_us: int = 1500
    busy_poll: bool = False
    server_metrics: bool = True
    retries: int = 0
    idempotency_keys: bool = False
    retry_backoff: str | None = None
    retry_max_wait: str | None = None

    @property
    def dialect_name(self) -> str:
        """``--dialect``, or the OpenAI dialect ``--api`` names."""
        return pick_dialect(self.dialect, None if self.api is None else f"openai.{self.api}", "--api")


def _steps(opts: BenchOptions) -> tuple[ClosedLoop | OpenLoop, ...]:
    """The sweep ``--concurrency`` or ``--rate`` describes."""
    if opts.concurrency and opts.rate:
        raise BenchConfigError("give --concurrency or --rate, not both")
    if opts.rate:
        process = InterArrival(opts.arrival)
        return tuple(OpenLoop(r, process, opts.burstiness, opts.max_concurrency) for r in parse_numbers(opts.rate))
    values = parse_numbers(opts.concurrency or "1")
    if any(v != int(v) for v in values):
        raise BenchConfigError(f"--concurrency takes whole numbers, got {opts.concurrency!r}")
    return tuple(ClosedLoop(int(v)) for v in values)


def _workload(opts: BenchOptions) -> Workload:
    """The workload ``--class`` (a mix) or the single-class options describe."""
    if opts.classes:
        if opts.prompts:
            raise BenchConfigError("--prompts applies to a single-class workload; use file=PATH inside --class")
        return Workload(tuple(parse_class(c) for c in opts.classes), seed=opts.seed)
    return Workload.single(
        parse_length(opts.prompt_tokens),
        parse_length(opts.output_tokens),
        ignore_eos=opts.ignore_eos,
        prompt_file=opts.prompts,
        seed=opts.seed,
        name=Path(opts.prompts).stem if opts.prompts else "default",
    )


def build_config(target: Target, opts: BenchOptions) -> BenchConfig:
    """The :class:`BenchConfig` the command-line options describe (raises the spec errors on bad input)."""
    warmup_requests, warmup_s = parse_warmup(opts.warmup) if opts.warmup else (0, 0.0)
    return BenchConfig(
        target=target,
        steps=_steps(opts),
        workload=_workload(opts),
        model=opts.model,
        requests=opts.requests,
        duration_s=parse_duration_s(opts.duration) if opts.duration else None,
        warmup_requests=warmup_requests,
        warmup_s=warmup_s,
        drain_s=parse_duration_s(opts.drain) if opts.drain else None,
        workers=None if opts.workers == "auto" else int(opts.workers),
        slo=parse_slo(opts.slo) if opts.slo else None,
        temperature=opts.temperature,
        new_connection_per_request=opts.no_reuse,
        spin_us=opts.spin_us,
        busy_poll=opts.busy_poll,
        server_metrics=opts.server_metrics,
        retries=opts.retries,
        idempotency_keys=opts.idempotency_keys,
        retry_backoff_s=parse_duration_s(opts.retry_backoff) if opts.retry_backoff else DEFAULT_BACKOFF_S,
        retry_max_wait_s=parse_duration_s(opts.retry_max_wait) if opts.retry_max_wait else DEFAULT_MAX_WAIT_S,
    )


@click.command("bench")
@click.argument("url")
@click.option("--model", "-m", help="Model name (default: the first one the server lists at /models).")
@dialect_option
@click.option(
    "--api",
    type=click.Choice(["chat", "completions"]),
    help="OpenAI endpoint: chat (= --dialect openai.chat) or completions (= --dialect openai.completions).",
)
@click.option("--concurrency", "-c", help="Closed loop: users in flight; a list sweeps (1,8,64). Default 1.")
@click.option("--rate", "-r", help="Open loop: arrivals per second; a list sweeps (10,50,100).")
@click.option(
    "--arrival",
    type=click.Choice([p.value for p in InterArrival]),
    default="poisson",
    show_default=True,
    help="Open-loop inter-arrival distribution.",
)
@click.option(
    "--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape k (<1 bursty, 1 = Poisson)."
)
@click.option("--max-concurrency", type=int, help="Open loop: cap on requests in flight (excess waits, measured).")
@click.option("--requests", "-n", type=int, help="Measured requests per step (default 100 without --duration).")
@click.option("--duration", "-d", help="Measured time per step: 60, 60s, 2m.")
@click.option("--warmup", help="Excluded warm-up per step: N requests, or a time such as 10s.")
@click.option(
    "--prompt-tokens", default="256", show_default=True, help="N, uniform(a,b), normal(m,sd), lognormal(m,s)."
)
@click.option("--output-tokens", default="128", show_default=True, help="max_tokens per request, same forms.")
@click.option("--ignore-eos", is_flag=True, help="Ask the server to generate exactly max_tokens (vLLM, SGLang, lab).")
@click.option(
    "--class",
    "classes",
    multiple=True,
    help="A workload class NAME:weight=W,prompt=LEN,output=LEN[,ignore_eos][,file=F.jsonl]; repeat to mix.",
)
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False), help="JSONL file of prompts to replay.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload and the arrivals.")
@click.option("--slo", help="Goodput objectives, e.g. ttft=500ms,tpot=50ms,e2e=10s.")
@click.option(
    "--workers",
    default="auto",
    show_default=True,
    help="Worker processes (one event loop each), or auto; with --ray, Ray actors (one CPU each, spread over the "
    "cluster's nodes).",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="auto",
    default=None,
    metavar="[ADDRESS]",
    help="Run each step's workers as actors on an existing Ray cluster: ADDRESS as ray.init takes it (HOST:PORT of "
    "the head), default auto (the cluster this machine belongs to). Needs latscope[ray] on every node. Put it "
    "after URL, or write --ray=ADDRESS.",
)
@click.option("--out", "-o", type=click.Path(file_okay=False), help="Run directory (default runs/bench-<time>).")
@target_options(
    timeout_help=f"{Timeouts().connect_s:g} s to connect, {Timeouts().headers_s:g} s for the head and between reads"
)
@click.option("--http2/--no-http2", default=True, show_default=True, help="Offer HTTP/2 over TLS.")
@click.option("--no-reuse", is_flag=True, help="Open a new connection for every request.")
@click.option("--temperature", type=float)
@click.option("--drain", help="After a step's last dispatch, wait at most this long for in-flight requests.")
@click.option("--spin-us", type=int, default=1500, show_default=True, help="Pacing spin before each arrival (µs).")
@click.option(
    "--busy-poll",
    is_flag=True,
    help="Keep each worker's loop polling instead of sleeping (one core each): reads are stamped without waiting "
    "for the process to wake (event delay p99 ~0.5 ms instead of ~1.5 ms on a 2-core VM), and moments the machine "
    "took the CPU away are recorded.",
)
@click.option(
    "--server-metrics/--no-server-metrics",
    default=True,
    show_default=True,
    help="Scrape the target's /metrics (vLLM, SGLang, TGI, llama.cpp --metrics) once a second during the run: its "
    "running and waiting requests and KV usage are saved in run.json and drawn as the batch size over time.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Send a request again up to N times after a 429, 502, 503 or 504, or a connection lost before any token, "
    "as a production client would: each wait is a random draw below 0.5 s, 1 s, 2 s … (exponential backoff with "
    "full jitter, capped at 8 s), never shorter than the server's Retry-After / retry-after-ms. "
    "'x-should-retry: false' stops it; a stream that already sent tokens is retried only with --idempotency-keys. "
    "Results count logical requests; requests.parquet adds attempts, retry_ms (a phase) and every earlier attempt.",
)
@click.option(
    "--idempotency-keys",
    is_flag=True,
    help="Send an Idempotency-Key header (a fresh UUID per request, the same on each of its attempts), so a server "
    "that honours it executes a retried request once.",
)
@click.option(
    "--retry-backoff",
    help="The first retry's backoff ceiling (the wait is a random draw below it, or the server's Retry-After when "
    "longer; it doubles per retry up to 8 s), e.g. 200ms. [default: 500ms]",
)
@click.option(
    "--retry-max-wait",
    help="A longer Retry-After ends the request instead of waiting, e.g. 30s. [default: 60s]",
)
@click.option("--inline", is_flag=True, help="Run in this process (one worker, no live display).")
@click.option("--no-progress", is_flag=True, help="No live display.")
@click.option("--json", "as_json", is_flag=True, help="Print run.json to stdout instead of the tables.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write a self-contained HTML report of the run to FILE (as `latscope report RUN --html FILE`).",
)
@otlp_options
def command(
    url: str,
    target: TargetOptions,
    out: str | None,
    inline: bool,
    ray_address: str | None,
    no_progress: bool,
    as_json: bool,
    html_path: str | None,
    otlp_url: str | None,
    otlp_file: str | None,
    **options: Any,
) -> None:
    """Load-test URL (an OpenAI-style base URL such as http://127.0.0.1:8000/v1, or with --dialect the base URL
    that API wants: …/v1 for anthropic.messages and openai.responses, the server root for tgi.generate and Ollama's).

    Closed loop (--concurrency) or open loop (--rate, Poisson/constant/gamma), sweeps, workload mixes; per-request
    TTFT, every inter-token gap, TPOT, E2E, client queue time; goodput under --slo. Saves run.json,
    requests.parquet and events.parquet (pandas and DuckDB read them directly).

    \b
    Examples:
      latscope bench http://127.0.0.1:8000/v1 -c 1,8,32 -n 200 --warmup 20
      latscope bench URL -r 5 -d 60s --slo ttft=500ms,tpot=50ms
      latscope bench URL -c 16 --class 'chat:weight=0.8,prompt=normal(200,50),output=128' \\
                               --class 'rag:weight=0.2,prompt=4000,output=256'

    With --retries N a refused request waits (backoff with jitter, Retry-After honoured) and goes again; the run
    then says how much of its users' time went into retries (check retry-amplification) and whether retries went
    without --idempotency-keys.

    With --otlp URL / --otlp-file FILE every request carries a W3C traceparent, and after the run its spans (read
    back from requests.parquet, so the workers do no export work) are sent or written.

    With --ray [ADDRESS] each step runs on --workers Ray actors spread over an existing cluster, on one start
    instant (each actor's clock offset is measured and saved with its uncertainty); the run directory is the same.

    Exit status: 0 when requests completed (some may have failed: see the error columns); 2 when every measured
    request failed, or for usage errors; 130 when interrupted (Ctrl-C; what was measured is saved).
    """
    from latscope.load.bench import default_run_dir, load_summaries
    from latscope.report.run import render_run

    require_html(html_path)
    otlp = otlp_target(otlp_url, otlp_file)
    opts = BenchOptions(**options)
    workers = opts.workers
    if workers != "auto" and not workers.isdigit():
        raise click.BadParameter("a number or 'auto'", param_hint="--workers")
    if inline and workers not in ("auto", "1"):
        raise click.UsageError("--inline runs one worker in this process; drop --workers or --inline")
    if inline and ray_address is not None:
        raise click.UsageError("--inline runs in this process and --ray on a cluster; give one of them")
    try:
        # a traceparent per request costs CPU and only an OpenTelemetry export reads it
        resolved = target.resolve(url, opts.dialect_name, http2=opts.http2, trace_context=otlp.wanted)
        config = build_config(resolved, opts)
    except _SPEC_ERRORS as exc:
        raise click.UsageError(str(exc)) from None

    run_dir = Path(out) if out else default_run_dir()
    console = Console(stderr=as_json)
    show_progress = not (no_progress or inline or as_json) and console.is_terminal
    result = _run(console, config, run_dir, inline=inline, ray_address=ray_address, show_progress=show_progress)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(scrub_data(result.data), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        render_run(console, result.data, load_summaries(result.data), str(run_dir))
        if result.data.get("stamps"):
            console.print(describe_stamps(result.data["stamps"]), highlight=False)
    if html_path is not None:

        def build() -> str:
            from latscope.report.html import run_html

            return run_html(run_dir)

        write_html(console, html_path, build)
    if otlp.wanted:

        def spans() -> list[Span]:
            from latscope.export.otlp import clock_offset
            from latscope.export.run import run_spans

            return run_spans(run_dir, clock_offset_ns=clock_offset().offset_ns)

        export_spans(console, otlp, spans, "bench")
    if result.interrupted:
        sys.exit(130)
    _exit_if_all_failed(console, load_summaries(result.data))


def _run(
    console: Console, config: BenchConfig, run_dir: Path, *, inline: bool, ray_address: str | None, show_progress: bool
) -> RunResult:
    """Run the bench (with a live display when ``show_progress``); a failure to start is a usage error or a
    :class:`click.ClickException`, Ctrl-C before the first step exits 130."""
    from latscope.load.bench import ModelDiscoveryError, run_bench
    from latscope.load.onray import RayUnavailable
    from latscope.load.workers import WorkerFailed
    from latscope.report.progress import LiveProgress

    try:
        if show_progress:
            with LiveProgress(console, len(config.steps), config.measured_requests, config.duration_s) as live:
                return run_bench(
                    config, run_dir, ray_address=ray_address, on_step=live.start_step, on_progress=live.update
                )
        return run_bench(config, run_dir, inline=inline, ray_address=ray_address)
    except (ModelDiscoveryError, RayUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    except _SPEC_ERRORS as exc:
        raise click.UsageError(str(exc)) from None
    except WorkerFailed as exc:
        raise click.ClickException(f"a worker process failed; partial files are in {run_dir}\n{exc}") from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted before the first step started; nothing saved[/]")
        sys.exit(130)


def _exit_if_all_failed(console: Console, summaries: Sequence[StepSummary]) -> None:
    """Exit 2 naming the error kinds when every measured request failed."""
    measured = sum(s.overall.requests for s in summaries)
    if measured and not any(s.overall.ok for s in summaries):
        kinds: dict[str, int] = {}
        for s in summaries:
            for kind, n in s.overall.errors_by_kind.items():
                kinds[kind] = kinds.get(kind, 0) + n
        causes = ", ".join(f"{kind} ({n})" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        console.print(f"[bold red]error:[/] every one of the {measured} measured requests failed: {causes}")
        sys.exit(EXIT_ALL_FAILED)
