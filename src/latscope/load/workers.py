"""Worker processes: one uvloop event loop each, started together on a common monotonic deadline.

One Python event loop saturates one core. When a step needs more (thousands of streams, thousands of arrivals per
second) the parent starts ``N`` worker processes (``spawn``: no inherited event loop, threads or sockets), each with
its own client and connection pool, taking indices ``w, w+N, …`` of the step's plan. ``CLOCK_MONOTONIC`` is
system-wide on Linux, so one ``start_ns`` chosen by the parent is the same instant in every worker.

Parent ⇄ worker messages over a pipe::

    worker → parent   ("ready",)  ("progress", counters)  ("done", WorkerResult dict)  ("error", traceback text)
    parent → worker   ("start", start_ns)  ("stop",)

Workers ignore SIGINT: on Ctrl-C the parent sends ``stop`` to each, they stop dispatching, give in-flight requests a
moment, write their files and report, and the run is still saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import resource
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latscope.load.config import BenchConfig
from latscope.load.runner import Assignment, StepWorker, WorkerCounters, WorkerResult
from latscope.timeline.redact import register_secret_headers

#: Between "all workers ready" and the common start, ns: long enough for the start message to reach every worker
#: and for each to arm its timer, short enough not to be noticed.
START_MARGIN_NS = 200_000_000

#: A worker that has not said "ready" within this many seconds has failed to start (imports, a bad config).
READY_TIMEOUT_S = 60.0


class WorkerFailed(RuntimeError):
    """A worker process crashed or failed to start; the message carries its traceback."""


def raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard limit (each stream is a socket); return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@dataclass(frozen=True, slots=True)
class WorkerPayload:
    """Everything a worker process needs (picklable)."""

    config: dict[str, Any]
    headers: tuple[tuple[str, str], ...]
    model: str
    step: int
    worker: int
    workers: int
    run_dir: str


def worker_main(conn: multiprocessing.connection.Connection, payload: WorkerPayload) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop and tells us
    try:
        from latscope.wire.loop import run

        raise_fd_limit()
        # the headers are the user's (-H, --api-key): secrets in this process too, for every message it records
        register_secret_headers(payload.headers, by_hand=True)
        config = BenchConfig.from_dict(payload.config, headers=payload.headers)
        result = run(_worker_async(conn, config, payload))
        if result is not None:
            conn.send(("done", result.to_dict()))
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


async def _worker_async(
    conn: multiprocessing.connection.Connection, config: BenchConfig, payload: WorkerPayload
) -> WorkerResult | None:
    loop = asyncio.get_running_loop()

    def progress(counters: WorkerCounters) -> None:
        conn.send(("progress", counters.snapshot()))

    assignment = Assignment(payload.step, payload.worker, payload.workers)
    worker = StepWorker(config, payload.model, assignment, Path(payload.run_dir), on_progress=progress)
    await worker.prepare()  # the slow set-up happens before "ready", so the common start finds everyone waiting
    conn.send(("ready",))
    message = await loop.run_in_executor(None, conn.recv)
    if message[0] != "start":
        return None
    start_ns = int(message[1])

    def on_message() -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone: stop rather than run headless
            loop.remove_reader(conn.fileno())
            worker.stop()
            return
        if msg[0] == "stop":
            worker.stop()

    loop.add_reader(conn.fileno(), on_message)
    try:
        return await worker.run(start_ns)
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(conn.fileno())


class StepProcesses:
    """Runs one step on ``workers`` processes; :meth:`run` blocks until all have reported."""

    def __init__(self, config: BenchConfig, model: str, step: int, workers: int, run_dir: Path) -> None:
        self.config = config
        self.model = model
        self.step = step
        self.workers = workers
        self.run_dir = run_dir
        self.snapshots: dict[int, dict[str, Any]] = {}
        self.start_ns: int | None = None
        self._conns: list[multiprocessing.connection.Connection] = []
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._stop_sent = False

    def run(self, on_progress: Callable[[dict[int, dict[str, Any]]], None] | None = None) -> list[WorkerResult]:
        """Start the workers, start the step on a common deadline, collect results. Ctrl-C stops the step early
        (the results are still collected); a second Ctrl-C terminates the workers."""
        ctx = multiprocessing.get_context("spawn")
        config_dict = self.config.to_dict()
        # to_dict redacts credentials in the URL; workers need the real one
        config_dict["url"] = self.config.target.base_url
        for w in range(self.workers):
            parent_conn, child_conn = ctx.Pipe()
            payload = WorkerPayload(
                config_dict, self.config.target.headers, self.model, self.step, w, self.workers, str(self.run_dir)
            )
            proc = ctx.Process(target=worker_main, args=(child_conn, payload), name=f"latscope-worker-{w}", daemon=True)
            proc.start()
            child_conn.close()
            self._conns.append(parent_conn)
            self._procs.append(proc)
        try:
            return self._collect(on_progress)
        finally:
            for child in self._procs:
                child.join(timeout=5.0)
                if child.is_alive():
                    child.terminate()
                    child.join(timeout=5.0)
            for c in self._conns:
                c.close()

    def stop(self) -> None:
        """Ask every worker to stop dispatching and wrap up."""
        if self._stop_sent:
            return
        self._stop_sent = True
        for c in self._conns:
            with contextlib.suppress(OSError, BrokenPipeError):
                c.send(("stop",))

    def _collect(self, on_progress: Callable[[dict[int, dict[str, Any]]], None] | None) -> list[WorkerResult]:
        results: dict[int, WorkerResult] = {}
        ready: set[int] = set()
        index = {id(c): w for w, c in enumerate(self._conns)}
        open_conns = list(self._conns)
        ready_deadline = time.monotonic() + READY_TIMEOUT_S
        interrupts = 0
        while open_conns:
            try:
                readable = multiprocessing.connection.wait(open_conns, timeout=0.1)
                for ready_obj in readable:
                    w = index[id(ready_obj)]
                    conn = self._conns[w]
                    try:
                        msg: Any = conn.recv()
                    except (EOFError, OSError):
                        open_conns.remove(conn)
                        if w not in results:
                            raise WorkerFailed(f"worker {w} exited without a result") from None
                        continue
                    kind = msg[0]
                    if kind == "ready":
                        ready.add(w)
                        if len(ready) == self.workers:
                            self._start()
                    elif kind == "progress":
                        self.snapshots[w] = msg[1]
                    elif kind == "done":
                        results[w] = WorkerResult.from_dict(msg[1])
                        self.snapshots[w] = results[w].counters
                    elif kind == "error":
                        raise WorkerFailed(f"worker {w} failed:\n{msg[1]}")
                if self.start_ns is None and time.monotonic() > ready_deadline:
                    raise WorkerFailed(f"only {len(ready)} of {self.workers} workers started in {READY_TIMEOUT_S:g} s")
                if on_progress is not None:
                    on_progress(self.snapshots)
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts > 1:
                    for child in self._procs:
                        child.terminate()
                    raise
                if self.start_ns is None:
                    raise
                self.stop()
        return [results[w] for w in sorted(results)]

    def _start(self) -> None:
        self.start_ns = time.monotonic_ns() + START_MARGIN_NS
        for c in self._conns:
            c.send(("start", self.start_ns))

    @property
    def interrupted(self) -> bool:
        """True when :meth:`stop` was called (Ctrl-C)."""
        return self._stop_sent
