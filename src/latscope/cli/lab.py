"""``latscope lab``: run the reference server in the foreground until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import signal
import socket
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from latscope.lab.costmodel import CostModel
from latscope.lab.edge.errors import EdgeError
from latscope.lab.faults import FAULTS, PROFILES, UnknownFaultError
from latscope.lab.http.limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
)
from latscope.lab.idempotency import DEFAULT_TTL_S, DEFAULT_WAIT_S, check_store_spec
from latscope.lab.idemstore import StoreUnavailableError
from latscope.lab.ratelimit import LimitMode
from latscope.lab.replicas import Replicas, ReplicaStartError
from latscope.lab.scheduler import Policy
from latscope.lab.settings import DEFAULT_MODEL, LabSettings
from latscope.quietgc import QuietCollector, rss_bytes

if TYPE_CHECKING:
    from latscope.lab.app import Lab
    from latscope.lab.edge.lab import EdgeLab
    from latscope.lab.hop import HopLab

#: CLI option → CostModel field, for the cost-model overrides.
COST_OPTIONS: dict[str, str] = {
    "prefill_base_ms": "prefill_base_ms",
    "prefill_ms_per_token": "prefill_per_token_ms",
    "prefill_quadratic_ms": "prefill_quadratic_ms",
    "decode_base_ms": "decode_base_ms",
    "decode_ms_per_seq": "decode_per_seq_ms",
    "kv_blocks": "kv_blocks",
    "kv_block_tokens": "kv_block_tokens",
    "max_batch": "max_batch",
    "chunk_tokens": "chunk_tokens",
    "max_batched_tokens": "max_batched_tokens",
}


def faults_table() -> Table:
    """The fault catalogue as a rich table: fault, what it does, the finding it should trigger; profiles below."""
    profiles = "; ".join(f"{name}: {', '.join(sorted(members)) or 'no faults'}" for name, members in PROFILES.items())
    table = Table(
        title="latscope lab faults", title_justify="left", caption=f"profiles — {profiles}", caption_justify="left"
    )
    table.add_column("fault", style="bold cyan", no_wrap=True)
    table.add_column("what it does", ratio=1)
    table.add_column("finding it should trigger", style="magenta", no_wrap=True)
    for fault in FAULTS.values():
        table.add_row(fault.name, f"[dim]{fault.stage}:[/] {fault.description}", fault.finding_id)
    return table


def write_ready_file(path: Path, url: str, cert_path: Path | None) -> None:
    """Write the URL (first line) and, with TLS, the certificate path (second line), atomically: a parent process
    polling the file never reads half of it."""
    text = url + "\n" + (f"{cert_path}\n" if cert_path is not None else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".lab-ready-", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


#: How often the lab process looks for an idle moment to collect garbage, s.
IDLE_CHECK_S = 1.0

#: Young container objects worth an idle collection (fewer: nothing to gain).
IDLE_COLLECT_MIN_OBJECTS = 10_000


async def collect_when_idle(lab: Lab | HopLab, quiet: QuietCollector) -> None:
    """The lab process's garbage collection (see :mod:`latscope.quietgc`): only when its engine has nothing running
    or waiting, so no token is stamped or written late because of it; otherwise only the memory guard."""
    while True:
        await asyncio.sleep(IDLE_CHECK_S)
        scheduler = lab.scheduler
        if scheduler.running == 0 and scheduler.waiting == 0:
            if gc.get_count()[0] >= IDLE_COLLECT_MIN_OBJECTS:
                quiet.collect(rss_bytes())
        else:
            quiet.check(rss_bytes())


#: How often a replica looks whether the ``latscope lab`` that started it is still there, s.
PARENT_CHECK_S = 1.0


async def watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once the process ``parent_pid`` is no longer this one's parent (it exited): a replica never
    outlives the lab that started it."""
    while os.getppid() == parent_pid:
        await asyncio.sleep(PARENT_CHECK_S)
    stop.set()


async def serve(
    settings: LabSettings,
    ready_file: Path | None,
    console: Console,
    edge: str = "none",
    *,
    replicas: int = 1,
    parent_pid: int | None = None,
) -> None:
    """Start the lab (behind a real nginx with ``edge`` "nginx"; with ``replicas`` − 1 more lab processes on its
    port), announce it, serve until SIGINT/SIGTERM, stop cleanly. ``parent_pid``: this is a replica of that
    process, which it does not outlive; it announces nothing but its ready file."""
    # imported here so `latscope lab --list-faults` stays light
    from latscope.lab.app import Lab
    from latscope.lab.edge.lab import EdgeLab
    from latscope.lab.hop import HopLab

    lab: Lab | EdgeLab | HopLab
    if edge == "nginx":
        lab = EdgeLab(settings)
    else:
        lab = HopLab(settings) if settings.gateway_hop() is not None else Lab(settings)
    await lab.start()
    origin = lab.lab if isinstance(lab, EdgeLab) else lab
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    quiet = QuietCollector()
    quiet.enter(rss_bytes())
    housekeeping = loop.create_task(collect_when_idle(origin, quiet), name="latscope-lab-gc")
    watcher = loop.create_task(watch_parent(parent_pid, stop)) if parent_pid is not None else None
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers on Windows loops
            loop.add_signal_handler(signum, stop.set)
    others: Replicas | None = None
    try:
        if replicas > 1:
            others = Replicas(replica_main, dataclasses.replace(settings, port=origin.port), replicas - 1)
            await others.start()
        if parent_pid is not None:
            if ready_file is not None:
                write_ready_file(ready_file, lab.url, lab.cert_path)
            await stop.wait()
            return
        announce(lab, settings, console, others)
        click.echo(lab.url)  # alone on its line, last: easy for a script to take
        if ready_file is not None:
            write_ready_file(ready_file, lab.url, lab.cert_path)
        await stop.wait()
    finally:
        housekeeping.cancel()
        if watcher is not None:
            watcher.cancel()
        if others is not None:
            await asyncio.to_thread(others.stop)
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        await lab.stop()
        quiet.exit()
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)


def announce(lab: Lab | EdgeLab | HopLab, settings: LabSettings, console: Console, others: Replicas | None) -> None:
    """Say on the console what serves where: profile and faults, the certificate, HTTP/3, the idempotency store,
    the replicas, the gateway hop and its upstream, the metrics and health routes."""
    from latscope.lab.edge.lab import EdgeLab
    from latscope.lab.hop import HopLab

    origin = lab.lab if isinstance(lab, EdgeLab) else lab
    engine = origin.upstream if isinstance(origin, HopLab) else origin  # the lab that generates (and dedupes)
    faults = ", ".join(sorted(lab.faults)) or "none"
    through = " through nginx" if isinstance(lab, EdgeLab) else ""
    console.print(f"[bold green]latscope lab[/]{through} profile [bold]{settings.profile}[/], faults: {faults}")
    if lab.cert_path is not None:
        console.print(f"certificate to trust: {lab.cert_path}")
    if settings.http3:
        console.print(f"HTTP/3: UDP port {origin.port} (announced by Alt-Svc; latscope probe {lab.url} --http3)")
    if engine.idempotency_store is not None and settings.idempotency:
        console.print(f"idempotency keys: store {engine.idempotency_store.describe()}")
    if others is not None:
        pids = ", ".join(str(pid) for pid in [os.getpid(), *others.pids])
        console.print(f"{others.count + 1} replicas on one port (SO_REUSEPORT), processes {pids}")
    if isinstance(lab, HopLab):
        console.print(
            f"through a converting gateway ({lab.request_ms:g} ms per request, {lab.chunk_ms:g} ms per chunk); "
            f"its upstream, direct: {lab.direct_url}"
        )
        console.print(f"compare both: latscope diagnose {lab.url} --direct {lab.direct_url}")
    console.print(f"metrics: {lab.origin}/metrics   health: {lab.origin}/health   (Ctrl-C stops)")


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` (:func:`serve`) on uvloop when it is installed, else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


def replica_main(settings: LabSettings, ready_file: Path, parent_pid: int) -> None:
    """A replica process of ``latscope lab --replicas`` (:mod:`latscope.lab.replicas`): serves ``settings`` on the
    first lab's port, quietly, until SIGTERM, Ctrl-C or its parent's exit."""
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C at the terminal reaches every replica as well
        run(serve(settings, ready_file, Console(stderr=True, quiet=True), parent_pid=parent_pid))


def settings_from_options(options: dict[str, Any], *, zero_cost: bool = False) -> LabSettings:
    """The :class:`LabSettings` that the command's options describe: every option named after a settings field
    sets that field (``--batch-window-ms`` → ``batch_window_ms``), the cost-model options override the cost model
    (:data:`COST_OPTIONS`), ``--zero-cost`` starts from no simulated GPU time. Raises :class:`ValueError` (bad cost
    values) and :class:`~latscope.lab.faults.UnknownFaultError`."""
    cost = CostModel.zero() if zero_cost else CostModel.default()
    overrides = {field: options[name] for name, field in COST_OPTIONS.items() if options.get(name) is not None}
    fields = {f.name for f in dataclasses.fields(LabSettings)}
    values = {name: value for name, value in options.items() if name in fields}
    if values.get("policy") is not None:
        values["policy"] = Policy(values["policy"])
    if values.get("rate_limit_mode") is not None:
        values["rate_limit_mode"] = LimitMode(values["rate_limit_mode"])
    if values.get("idempotency_store") is not None:
        check_store_spec(values["idempotency_store"])
    settings = LabSettings(cost=cost.with_overrides(**overrides) if overrides else cost, **values)
    settings.active_faults  # noqa: B018 — validates the fault names before anything starts
    return settings


def replica_settings(settings: LabSettings, edge: str, console: Console) -> LabSettings:
    """``settings`` for a lab of several replicas (SO_REUSEPORT on the port); a :class:`click.UsageError` for what
    replicas cannot do: TLS (each would generate its own certificate) and the nginx edge (one nginx per lab)."""
    if settings.tls:
        raise click.UsageError("--replicas serves plain HTTP: each replica would generate its own certificate")
    if edge != "none":
        raise click.UsageError("--replicas and --edge nginx do not combine: put one nginx in front of the port")
    if settings.gateway_hop() is not None:
        raise click.UsageError("--replicas and the gateway hop (gateway-overhead) do not combine")
    if not hasattr(socket, "SO_REUSEPORT"):
        raise click.UsageError("--replicas needs SO_REUSEPORT, which this system does not have")
    if settings.idempotency_store == "memory" and settings.idempotency:
        console.print(
            "[yellow]warning:[/] each replica keeps its own idempotency keys: a duplicate that reaches another "
            "replica runs again (share --idempotency-store redis://…)"
        )
    return dataclasses.replace(settings, reuse_port=True)


OptionDecorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def valued(
    decls: str | tuple[str, str], kind: click.ParamType[Any, Any] | type[Any], default: Any, help: str
) -> OptionDecorator:
    """An option that takes a value: ``decls`` is its flag, or the flag and the parameter's name; ``kind`` its click
    type; ``default`` None when the setting falls back to what the faults imply."""
    flags = (decls,) if isinstance(decls, str) else decls
    return click.option(*flags, type=kind, default=default, help=help)


@click.command(name="lab", context_settings={"show_default": True})
@click.option("--host", default="127.0.0.1", help="Address to bind (loopback by default; the lab is a test server).")
@valued("--port", click.IntRange(0, 65535), 8088, "Port; 0 picks a free one.")
@valued(
    "--profile",
    click.Choice(sorted(PROFILES)),
    "tuned",
    "Fault bundle: tuned (none) or naive (short-keepalive, slow-parse, queue-hol, nagle).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    type=click.Choice(list(FAULTS)),
    help="Switch a fault on, on top of the profile (repeatable).",
)
@click.option(
    "--no-fault",
    "no_faults",
    multiple=True,
    type=click.Choice(list(FAULTS)),
    help="Switch a fault off, even if the profile has it (repeatable).",
)
@click.option("--tls/--no-tls", default=False, help="HTTPS with a self-signed certificate generated on start.")
@click.option("--http2/--no-http2", default=True, help="Offer HTTP/2 (ALPN h2; cleartext prior knowledge).")
@click.option(
    "--http3/--no-http3",
    default=False,
    help="Also serve HTTP/3 over UDP on the same port (needs --tls and aioquic: pip install 'latscope[http3]'); "
    "the TCP responses announce it with Alt-Svc.",
)
@click.option("--truth", is_flag=True, help="Stamp every stream event with the lab's send time (latscope.sent_ns).")
@click.option(
    "--api-key",
    default=None,
    help="Require the key on every API route: 'Authorization: Bearer KEY', or 'x-api-key: KEY' as Anthropic's "
    "clients send it.",
)
@click.option("--model", default=DEFAULT_MODEL, help="The model name served.")
@valued(
    "--policy",
    click.Choice([p.value for p in Policy]),
    None,
    "Scheduling policy [default: priority; fifo with the queue-hol fault].",
)
@valued(
    "--batch-window-ms",
    click.FloatRange(min=0),
    None,
    "Dynamic batching window, ms [default: 0; 50 with the batching-window fault].",
)
@valued(
    "--batch-trigger",
    click.IntRange(min=1),
    None,
    "Waiting requests that close the batching window early [default: 1; 8 with batching-window].",
)
@click.option("--zero-cost", is_flag=True, help="No simulated GPU time at all (throughput tests).")
@valued("--prefill-base-ms", click.FloatRange(min=0), None, "Cost model: per prefill step, ms.")
@valued("--prefill-ms-per-token", click.FloatRange(min=0), None, "Cost model: per prompt token, ms.")
@valued("--prefill-quadratic-ms", click.FloatRange(min=0), None, "Cost model: per prompt token squared, ms.")
@valued("--decode-base-ms", click.FloatRange(min=0), None, "Cost model: per decode step, ms.")
@valued("--decode-ms-per-seq", click.FloatRange(min=0), None, "Cost model: per sequence in a decode step, ms.")
@valued("--kv-blocks", click.IntRange(min=1), None, "Cost model: KV-cache blocks.")
@valued("--kv-block-tokens", click.IntRange(min=1), None, "Cost model: tokens per KV block.")
@valued("--max-batch", click.IntRange(min=1), None, "Cost model: most running sequences.")
@valued("--chunk-tokens", click.IntRange(min=1), None, "Cost model: chunked-prefill token budget per step.")
@valued("--max-batched-tokens", click.IntRange(min=1), None, "Cost model: prompt tokens per unchunked prefill step.")
@valued(
    "--rate-limit-mode",
    click.Choice([m.value for m in LimitMode]),
    None,
    "Gateway rate limiter per API key: reject (429 + Retry-After) or queue (a bounded wait, then 429) "
    "[default: reject; queue with the gateway-queue fault].",
)
@valued(
    ("--rate-limit-rpm", "rate_limit_requests_per_min"),
    click.IntRange(min=1),
    None,
    "Requests per minute per API key [default: no limit; 20 with rate-limit, 600 with gateway-queue].",
)
@valued(
    ("--rate-limit-tpm", "rate_limit_tokens_per_min"),
    click.IntRange(min=1),
    None,
    "Tokens (prompt + max_tokens) per minute per API key [default: no limit].",
)
@valued(
    "--rate-limit-burst",
    click.IntRange(min=1),
    None,
    "Requests a full bucket holds [default: a minute's quota; 3 with gateway-queue].",
)
@valued(
    "--rate-limit-max-wait-s",
    click.FloatRange(min=0.0),
    None,
    "Queue mode: the longest a request waits before it gets 429 instead [default: 2].",
)
@click.option(
    "--idempotency-store",
    default="memory",
    help="Where the gateway keeps Idempotency-Key claims and answers: memory (this process) or a Redis URL "
    "(redis://host:port/db) that several labs share.",
)
@valued(
    ("--idempotency-ttl", "idempotency_ttl_s"),
    click.FloatRange(min=0.001),
    DEFAULT_TTL_S,
    "Seconds a finished answer is replayed to a request with the same Idempotency-Key.",
)
@valued(
    "--idempotency-wait-s",
    click.FloatRange(min=0.0),
    DEFAULT_WAIT_S,
    "How long a duplicate waits for the running original before it gets 409.",
)
@click.option(
    "--circuit-breaker",
    is_flag=True,
    help="Put a circuit breaker in front of the engine: once --circuit-error-ratio of the recent requests failed "
    "upstream it refuses everything (503 with Retry-After) for --circuit-open-s, then lets one probe through.",
)
@valued(
    "--circuit-error-ratio",
    click.FloatRange(min=0.0, max=1.0, min_open=True),
    0.5,
    "The share of failed requests among the last 20 (at least 10 seen) that opens the breaker.",
)
@valued(
    "--circuit-open-s",
    click.FloatRange(min=0.0, min_open=True),
    5.0,
    "Seconds the breaker stays open before its half-open probe.",
)
@valued(
    "--upstream-error-rate",
    click.FloatRange(min=0.0, max=1.0),
    0.0,
    "The share of requests the engine fails before their first token (503 engine_unavailable): an unhealthy "
    "upstream for the breaker to trip on.",
)
@valued(
    "--gateway-hop-ms",
    click.FloatRange(min=0.0),
    None,
    "Put a converting gateway in front (a real proxy hop to an upstream lab that also serves directly) that "
    "spends this long on each request, ms [default: no hop; 16.5 with gateway-overhead].",
)
@valued(
    "--gateway-chunk-ms",
    click.FloatRange(min=0.0),
    None,
    "The gateway's cost per streamed chunk, ms (also puts the hop in front) [default: 1 with gateway-overhead].",
)
@valued(
    "--image-ms-per-mb",
    click.FloatRange(min=0.0),
    None,
    "What preprocessing image parts costs, ms per MB of image, decoding included [default: 1; 40 with "
    "slow-image-preprocessing].",
)
@valued("--seed", int, 0, "Base seed of the generated token text.")
@valued("--metrics-names", click.Choice(["lab", "vllm"]), "lab", "Metric names on /metrics: the lab's own or vLLM's.")
@valued(
    "--batch-log",
    click.Path(dir_okay=False, path_type=Path),
    None,
    "Append the engine's batch records (JSON lines) to this file.",
)
@valued("--max-body-bytes", click.IntRange(min=1), DEFAULT_MAX_BODY_BYTES, "Larger request bodies get 413.")
@valued("--max-header-bytes", click.IntRange(min=1024), DEFAULT_MAX_HEADER_BYTES, "Larger request heads get 431.")
@valued(
    "--header-timeout-s",
    click.FloatRange(min=0.01),
    DEFAULT_HEADER_TIMEOUT_S,
    "Time a client gets to send a request head (slowloris protection).",
)
@valued(
    "--keepalive-timeout-s",
    click.FloatRange(min=0.01),
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    "Idle keep-alive connections close after this long.",
)
@valued(
    "--ready-file",
    click.Path(dir_okay=False, path_type=Path),
    None,
    "Once serving, write the URL here (and the certificate path on a second line with --tls).",
)
@valued(
    "--edge",
    click.Choice(["none", "nginx"]),
    "none",
    "Serve through a real nginx (needs nginx): edge faults become nginx directives.",
)
@valued(
    "--replicas",
    click.IntRange(min=1),
    1,
    "Lab processes serving one port (SO_REUSEPORT: the kernel spreads connections among them). They share "
    "idempotency keys only through --idempotency-store redis://…",
)
@click.option("--list-faults", is_flag=True, help="Print the fault catalogue and exit.")
def command(
    zero_cost: bool,
    ready_file: Path | None,
    edge: str,
    replicas: int,
    list_faults: bool,
    **options: Any,
) -> None:
    """Run the reference OpenAI-compatible server, with any catalogued bottleneck switched on or off.

    One engine serves every API latscope speaks, each on its usual path: OpenAI chat and completions, OpenAI
    Responses (/v1/responses), Anthropic Messages (/v1/messages), TGI (/generate_stream, /generate, /) and Ollama
    (/api/chat, /api/generate); every fault shows through each of them.

    \b
    Examples:
      latscope lab                                  tuned: what a well-configured server looks like
      latscope lab --profile naive                  the four hidden bottlenecks at once
      latscope lab --fault proxy-buffering --tls    one fault on top of the tuned profile
      latscope lab --tls --http3                    HTTP/3 over UDP beside TCP, on the same port
      latscope lab --list-faults                    every fault and the finding it should trigger
      latscope lab --fault gateway-overhead         a converting gateway in front; prints its upstream's URL
      latscope lab --tls --edge nginx --fault proxy-buffering   a real nginx in front, buffering the stream
      latscope lab --replicas 4 --idempotency-store redis://127.0.0.1:6379/0   four labs, one port, shared keys
      latscope lab --circuit-breaker --upstream-error-rate 0.6   a failing engine behind a breaker that opens
    """
    console = Console(stderr=True)
    if list_faults:
        Console().print(faults_table())
        return
    try:
        settings = settings_from_options(options, zero_cost=zero_cost)
    except (UnknownFaultError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if settings.http3 and not settings.tls:
        raise click.UsageError("--http3 needs --tls: QUIC always encrypts")
    if settings.http3 and (edge != "none" or settings.gateway_hop() is not None):
        raise click.UsageError("--http3 is served by the lab itself: not with --edge nginx or the gateway hop")
    if edge == "nginx" and settings.gateway_hop() is not None:
        raise click.UsageError(
            "the gateway hop (gateway-overhead, --gateway-hop-ms) cannot be combined with --edge nginx"
        )
    if replicas > 1:
        settings = replica_settings(settings, edge, console)
    try:
        run(serve(settings, ready_file, console, edge, replicas=replicas))
    except EdgeError as exc:
        raise click.ClickException(f"the nginx edge did not start: {exc}") from None
    except ReplicaStartError as exc:
        raise click.ClickException(f"the lab's replicas did not start: {exc}") from None
    except StoreUnavailableError as exc:
        raise click.ClickException(f"the idempotency store does not answer: {exc}") from None
    except ValueError as exc:  # a Redis store without redis-py installed
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        where = f"{settings.host}:{settings.port}"
        raise click.ClickException(f"cannot serve on {where}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass  # Ctrl-C before the signal handlers were installed: nothing was serving yet
