"""``latscope bench`` as a Python API: run every step of a :class:`~latscope.load.config.BenchConfig`, save the run
directory, return the summaries.

* :func:`run_bench` — from synchronous code (the CLI): each step on worker processes (see
  :mod:`latscope.load.workers`), on Ray actors across a cluster with ``ray_address`` (see
  :mod:`latscope.load.onray`), or in this process with ``inline=True``.
* :func:`bench_async` — from a running event loop (pytest, notebooks): every step in this loop, one worker.

Either way the run directory holds ``run.json``, ``requests.parquet`` and ``events.parquet``
(:mod:`latscope.runs.storage`), and :func:`summarize_dir` recomputes the summaries from the tables (another SLO,
say) without re-running anything. Each step's entry in ``run.json`` also carries the checks a bench run decides on
its own (``checks``: ``retry-amplification``, from the step's retries; :mod:`latscope.checks.retries`).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import importlib.metadata
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latscope import __version__
from latscope.checks.retries import RetryEvidence, check_retry_amplification
from latscope.load.config import BenchConfig, BenchConfigError, auto_workers
from latscope.load.health import ClientHealth, available_cores
from latscope.load.runner import Assignment, StepWorker, WorkerCounters, WorkerResult
from latscope.load.servermetrics import GaugeSampler
from latscope.load.slo import Slo
from latscope.load.stamps import stamps_summary
from latscope.load.summary import GroupSummary, StepSummary, summarize_run
from latscope.load.workload import Plan
from latscope.runs.storage import (
    iter_event_batches,
    merge_parts,
    read_requests,
    read_run_json,
    write_run_json,
)

#: Seconds between "ready" and the start of an in-process step (lets the loop settle after setup).
INLINE_START_DELAY_S = 0.05


class ModelDiscoveryError(RuntimeError):
    """No ``--model`` was given and the server's ``/models`` did not name one."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """How one step ran: its workers' results (counters, health, pool statistics)."""

    step: int
    label: str
    workers: int
    results: list[WorkerResult] = field(default_factory=list)
    interrupted: bool = False
    ray: dict[str, Any] | None = None  #: on Ray: each actor's host, node, clock offset, and the load lost

    @property
    def health(self) -> ClientHealth:
        """The workers' health samples merged."""
        return ClientHealth.merge([r.health for r in self.results])

    def pool_totals(self) -> dict[str, int]:
        """Pool statistics summed over workers and origins."""
        totals: dict[str, int] = {}
        for r in self.results:
            for stats in r.pool.values():
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0) + int(v)
        return totals


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished (or interrupted) run: where it is saved and what it measured."""

    run_dir: Path
    model: str
    steps: list[StepSummary]
    interrupted: bool
    data: dict[str, Any]  #: the content of ``run.json``


def environment() -> dict[str, Any]:
    """Facts about the machine and software that produced the numbers."""
    import numpy
    import pyarrow

    try:
        uvloop_version: str | None = importlib.metadata.version("uvloop")
    except importlib.metadata.PackageNotFoundError:
        uvloop_version = None
    return {
        "latscope": __version__,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cores": available_cores(),
        "uvloop": uvloop_version,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def default_run_dir(base: Path = Path("runs")) -> Path:
    """``runs/bench-YYYYmmdd-HHMMSS`` (a suffix is added when it exists)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = base / f"bench-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"bench-{stamp}-{n}"
    return path


async def resolve_model(config: BenchConfig) -> str:
    """``config.model``, or the first model the server's model list names."""
    if config.model:
        return config.model
    from latscope.wire import ModelListError, WireError

    target = config.target
    async with target.client() as client:
        try:
            models, _ = await client.list_models(target.base_url, target.dialect)
        except WireError as exc:
            where = target.base_url + target.dialect.models_path
            raise ModelDiscoveryError(f"could not list models at {where}: {exc}; pass --model") from None
        except ModelListError as exc:
            raise ModelDiscoveryError(f"{exc}; pass --model") from None
    return models[0]


def validate(config: BenchConfig) -> Plan:
    """Fail before anything starts: read the prompt files (a bad line is reported with its number) and check that
    every class's requests suit the dialect (a 'messages' line for an API that takes a prompt, ignore_eos for one
    without it). Returns the plan, ready to use."""
    plan = Plan(config.workload)
    dialect = config.target.dialect
    for cls in config.workload.classes:
        records = plan.prompt_records(cls.name) if cls.prompt_file else []
        messages = next((r.messages for r in records if r.messages is not None), None)
        try:
            dialect.build_request("model", messages or "prompt", 1, ignore_eos=cls.ignore_eos)
        except ValueError as exc:
            source = f"{cls.prompt_file} has 'messages' lines; " if messages is not None else ""
            raise BenchConfigError(f"class {cls.name!r}: {source}{exc}") from None
    return plan


def _step_workers(config: BenchConfig, step: int) -> int:
    return config.workers or auto_workers(config.steps[step], config.target.base_url)


async def bench_async(
    config: BenchConfig,
    run_dir: Path,
    *,
    on_progress: Callable[[int, WorkerCounters], None] | None = None,
) -> RunResult:
    """Run every step in the running event loop (one worker; ``config.workers`` must be None or 1)."""
    if config.workers not in (None, 1):
        raise ValueError("bench_async runs one worker in this loop; use run_bench for several worker processes")
    plan = validate(config)
    model = await resolve_model(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.UTC)
    records: list[StepRecord] = []
    gauges = _sampler(config)
    for step, arrival in enumerate(config.steps):
        gauges.mark(arrival.label)

        def progress(counters: WorkerCounters, step: int = step) -> None:
            if on_progress is not None:
                on_progress(step, counters)

        worker = StepWorker(config, model, Assignment(step, 0, 1), run_dir, on_progress=progress, plan=plan)
        await worker.prepare()
        start_ns = time.monotonic_ns() + int(INLINE_START_DELAY_S * 1e9)
        task = asyncio.ensure_future(worker.run(start_ns))
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            worker.stop()
            result = await task
            records.append(StepRecord(step, arrival.label, 1, [result], interrupted=True))
            break
        records.append(StepRecord(step, arrival.label, 1, [result]))
    # the last scrape may need this loop (a target served in-process): wait for it off the loop
    return finish_run(config, model, run_dir, records, started, server_gauges=await asyncio.to_thread(gauges.stop))


def run_bench(
    config: BenchConfig,
    run_dir: Path,
    *,
    inline: bool = False,
    ray_address: str | None = None,
    on_step: Callable[[int, str, int], None] | None = None,
    on_progress: Callable[[int, dict[int, dict[str, Any]]], None] | None = None,
) -> RunResult:
    """Run every step (worker processes, this process with ``inline=True``, or Ray actors on the cluster at
    ``ray_address``, "auto" for this machine's), save, summarise.

    ``on_step(step, label, workers)`` is called as each step starts; ``on_progress(step, snapshots)`` with the
    workers' latest counters (about twice a second). Ctrl-C ends the current step early and saves the run.
    On Ray, ``config.workers`` is the number of actors (one CPU each, spread over the nodes); None sizes it from
    the load and the cluster's CPUs. Raises :class:`~latscope.load.onray.RayUnavailable` when Ray is missing or
    no cluster answers.
    """
    from latscope.load.workers import StepProcesses
    from latscope.wire.loop import run as run_loop

    if inline:

        def inline_progress(step: int, counters: WorkerCounters) -> None:
            if on_progress is not None:
                on_progress(step, {0: counters.snapshot()})

        return run_loop(bench_async(config, run_dir, on_progress=inline_progress))
    if ray_address is not None:
        return _run_on_ray(config, run_dir, ray_address, on_step=on_step, on_progress=on_progress)

    validate(config)
    model = run_loop(resolve_model(config))
    run_dir.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.UTC)
    records: list[StepRecord] = []
    gauges = _sampler(config)
    for step, arrival in enumerate(config.steps):
        gauges.mark(arrival.label)
        workers = _step_workers(config, step)
        if on_step is not None:
            on_step(step, arrival.label, workers)
        procs = StepProcesses(config, model, step, workers, run_dir)

        def progress(snapshots: dict[int, dict[str, Any]], step: int = step) -> None:
            if on_progress is not None:
                on_progress(step, snapshots)

        results = procs.run(progress)
        records.append(StepRecord(step, arrival.label, workers, results, interrupted=procs.interrupted))
        if procs.interrupted:
            break
    return finish_run(config, model, run_dir, records, started, server_gauges=gauges.stop())


def _run_on_ray(
    config: BenchConfig,
    run_dir: Path,
    address: str,
    *,
    on_step: Callable[[int, str, int], None] | None,
    on_progress: Callable[[int, dict[int, dict[str, Any]]], None] | None,
) -> RunResult:
    """:func:`run_bench` with each step's workers as Ray actors (:mod:`latscope.load.onray`)."""
    from latscope.load import onray
    from latscope.wire.loop import run as run_loop

    validate(config)
    connected = onray.connect(address)
    try:
        model = run_loop(resolve_model(config))
        run_dir.mkdir(parents=True, exist_ok=True)
        started = _dt.datetime.now(_dt.UTC)
        records: list[StepRecord] = []
        gauges = _sampler(config)
        cpus = onray.cluster_cpus()
        for step, arrival in enumerate(config.steps):
            gauges.mark(arrival.label)
            workers = config.workers or auto_workers(arrival, config.target.base_url, cores=cpus)
            if workers > cpus:  # the extra actors would wait for a CPU until READY_TIMEOUT_S
                raise BenchConfigError(f"--workers {workers}: the Ray cluster has {cpus} CPUs, one per actor")
            if on_step is not None:
                on_step(step, arrival.label, workers)
            ray_step = onray.RayStep(config, model, step, workers, run_dir, name_prefix=f"latscope-{run_dir.name}")

            def progress(snapshots: dict[int, dict[str, Any]], step: int = step) -> None:
                if on_progress is not None:
                    on_progress(step, snapshots)

            results = ray_step.run(progress)
            records.append(
                StepRecord(
                    step, arrival.label, workers, results, interrupted=ray_step.interrupted, ray=ray_step.to_dict()
                )
            )
            if ray_step.interrupted:
                break
        return finish_run(config, model, run_dir, records, started, server_gauges=gauges.stop(), ray_address=address)
    finally:
        if connected:
            onray.disconnect()


def _sampler(config: BenchConfig) -> GaugeSampler | _NoSampler:
    """The target's gauges, scraped from now until the run ends (unless ``config.server_metrics`` is off)."""
    if not config.server_metrics:
        return _NoSampler()
    sampler = GaugeSampler(config.target)
    sampler.start()
    return sampler


class _NoSampler:
    """Stands in for :class:`GaugeSampler` when the run scrapes no metrics."""

    def mark(self, label: str) -> None:
        """Nothing to mark."""

    def stop(self) -> None:
        """Nothing was scraped."""


def finish_run(
    config: BenchConfig,
    model: str,
    run_dir: Path,
    records: list[StepRecord],
    started: _dt.datetime,
    *,
    server_gauges: dict[str, Any] | None = None,
    ray_address: str | None = None,
) -> RunResult:
    """Merge the workers' part files, summarise every step that ran, write ``run.json`` (with the target's gauges
    over the run, :mod:`latscope.load.servermetrics`, when sampled; on Ray, the cluster's address and each step's
    actors)."""
    n_requests, n_events = merge_parts(run_dir)
    steps_meta = [(r.step, r.label, config.steps[r.step].to_dict()) for r in records]
    clients = {r.step: r.health for r in records if r.results}
    requests = read_requests(run_dir)
    summaries = summarize_run(
        requests,
        iter_event_batches(run_dir, ["step", "request_id", "gap_ms", "delay_ms", "coalesced"]),
        steps_meta,
        slo=config.slo,
        clients=clients,
    )
    for r, s in zip(records, summaries, strict=True):
        if r.ray is not None and r.ray.get("actors_lost"):
            s.warnings.append(missing_load_warning(r.ray))
    interrupted = any(r.interrupted for r in records) or len(records) < len(config.steps)
    data: dict[str, Any] = {
        "created": started.isoformat(timespec="seconds"),
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "interrupted": interrupted,
        "model": model,
        "config": config.to_dict(),
        "environment": environment(),
        "files": {
            "requests": "requests.parquet",
            "events": "events.parquet",
            "requests_rows": n_requests,
            "events_rows": n_events,
        },
        "steps": [_step_entry(config, r, s) for r, s in zip(records, summaries, strict=True)],
    }
    if ray_address is not None:
        data["ray"] = {"address": ray_address}
    if server_gauges is not None:
        data["server_gauges"] = server_gauges
    clocks = [{"step": res.step, "worker": res.worker, **res.clock} for r in records for res in r.results if res.clock]
    delays = iter_event_batches(run_dir, ["read_delay_ms"])
    data["stamps"] = stamps_summary(config.target.stamps, requests, delays, clocks)
    write_run_json(run_dir, data)
    return RunResult(run_dir=run_dir, model=model, steps=summaries, interrupted=interrupted, data=data)


def retry_evidence(config: BenchConfig, group: GroupSummary) -> RetryEvidence:
    """What ``retry-amplification`` reads from a step's summary (:mod:`latscope.checks.retries`)."""
    return RetryEvidence(
        retries_allowed=config.retries,
        idempotency_keys=config.idempotency_keys,
        requests=group.requests,
        attempts=group.attempts,
        retried=group.retried,
        unkeyed_retries=group.unkeyed_retries,
        executed_again=group.executed_again,
        retry_ms=group.retry_time_ms,
        retry_wait_ms=group.retry_wait_time_ms,
        request_ms=group.request_time_ms,
    )


def missing_load_warning(ray: dict[str, Any]) -> str:
    """What a step on Ray lost with its dead actors, in one sentence."""
    lost = [a for a in ray["actors"] if a["state"] == "lost"]
    where = ", ".join(f"actor {a['worker']} on {a.get('host', '?')}" for a in lost)
    not_sent = ray["requests_not_sent"]
    unsent = "an unknown number of requests not sent (closed loop)" if not_sent is None else f"{not_sent} not sent"
    return (
        f"{ray['actors_lost']} Ray actor(s) lost mid-step ({where}): {ray['requests_lost']} requests lost in flight "
        f"or unreported (error kind worker-lost), {unsent}; {ray['missing_share']:.1%} of the offered load is missing"
    )


def _step_entry(config: BenchConfig, record: StepRecord, summary: StepSummary) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "step": record.step,
        "label": record.label,
        "workers": record.workers,
        "interrupted": record.interrupted,
        "pool": record.pool_totals(),
        "summary": summary.to_dict(),
        "checks": [check_retry_amplification(retry_evidence(config, summary.overall)).to_dict()],
    }
    if record.ray is not None:
        entry["ray"] = record.ray
    return entry


def load_summaries(data: dict[str, Any]) -> list[StepSummary]:
    """The step summaries stored in a ``run.json`` dict."""
    return [StepSummary.from_dict(s["summary"]) for s in data.get("steps", [])]


def summarize_dir(run_dir: Path, slo: Slo | None = None) -> list[StepSummary]:
    """Recompute a saved run's summaries from its tables (e.g. with another ``slo``); client health comes from
    ``run.json``."""
    data = read_run_json(run_dir)
    old = load_summaries(data)
    if slo is None and data["config"].get("slo"):
        slo = Slo.from_dict(data["config"]["slo"])
    steps_meta = [(s.step, s.label, s.arrival) for s in old]
    clients = {s.step: s.client for s in old if s.client is not None}
    return summarize_run(
        read_requests(run_dir),
        iter_event_batches(run_dir, ["step", "request_id", "gap_ms", "delay_ms", "coalesced"]),
        steps_meta,
        slo=slo,
        clients=clients,
    )
