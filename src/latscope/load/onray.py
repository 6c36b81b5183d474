"""Steps on a Ray cluster: each worker of a step is a Ray actor, anywhere on the cluster (``latscope bench --ray``).

An actor runs exactly what a local worker process runs (:class:`~latscope.load.runner.StepWorker` on its own uvloop
event loop, in a thread of the actor's process): its round-robin share ``w, w+N, …`` of the step's one global
schedule and plan, both reproducible from the seed. The driver checks that each actor derived the same schedule (a
fingerprint of its first arrivals), so a host with another numpy cannot silently offer other load.

The driver

1. connects with ``ray.init(address=…)`` (``"auto"``: the cluster this machine belongs to) and creates ``N`` actors
   (one CPU each, spread over the nodes);
2. estimates each actor's clock offset (:mod:`latscope.load.clocksync`: 20 exchanges, minimum round trip);
3. picks one start on its own monotonic clock and sends each actor that instant converted to the actor's clock; each
   actor then paces on its own monotonic clock, so arrivals are on time to within the offset's uncertainty;
4. polls the actors about three times a second for their counters (the live display) and their finished requests,
   which come back as columnar record batches (``requests`` and ``events`` Arrow tables, the rows a local worker
   writes, as Arrow IPC streams: :func:`encode_table`) at least once a second, and writes them to the same part
   files a local worker writes; the run then merges into the same run directory.

Per-request durations never use the offsets (every mark of a request is on one actor's clock). The ``*_at_ms``
columns are offsets from each actor's own start, which is the common start to within that actor's
``clock.uncertainty_ms`` (``run.json``, step ``ray.actors``): comparing timelines across actors carries that error.

An actor that dies mid-step (``ray.kill``, a crashed process, a lost node) raises ``RayActorError`` on the driver's
next poll. Its requests that were due before then and never came back are written as rows with the error kind
``worker-lost`` (phase ``pool``: how far each got is unknown) and the exception as the message; the arrivals it would
still have sent are counted as not sent. The step completes with the other actors and ``run.json`` says how much of
the offered load went missing. Ctrl-C asks every actor to stop (as with local workers); a second one kills them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from latscope.load.arrivals import ClosedLoop, OpenLoop, Schedule
from latscope.load.clocksync import DEFAULT_EXCHANGES, ClockOffset, measure_offset
from latscope.load.config import BenchConfig, split_evenly
from latscope.load.runner import Assignment, StepWorker, WorkerCounters, WorkerResult
from latscope.load.workers import READY_TIMEOUT_S, WorkerFailed, raise_fd_limit
from latscope.load.workload import Plan
from latscope.runs.records import EVENT_SCHEMA, REQUEST_SCHEMA, RequestContext, build_tables
from latscope.runs.storage import open_part, part_paths
from latscope.timeline.model import ErrorKind, RequestError, Timeline
from latscope.timeline.redact import register_secret_headers

#: Between the last actor's "ready" and the common start, ns: the start message crosses the network to every actor
#: (a round trip is ~1 ms on one machine, a few ms across a cluster) and each arms its timer.
RAY_START_MARGIN_NS = 500_000_000

#: How often the driver asks every actor for its counters and finished requests, s.
POLL_INTERVAL_S = 0.3

#: The longest an actor holds finished requests before handing them over, s: what a dying actor can lose unreported.
RAY_FLUSH_INTERVAL_S = 1.0

#: Arrivals fingerprinted to check that an actor derived the driver's schedule.
SCHEDULE_FINGERPRINT_ARRIVALS = 256

#: After a stop (Ctrl-C), how long the driver waits for the actors to report before killing them, s.
STOP_WAIT_S = 10.0


#: How long the driver waits for a TCP connection to the cluster's address before saying nobody is there, s.
CONNECT_TIMEOUT_S = 5.0


def encode_table(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream: what an actor hands the driver. Ray's own serializer walks an Arrow table
    in Python on the actor's main thread (a profile of an actor caught it there; pickling a batch's two tables takes
    ~0.7 ms here), holding the GIL that the step's event loop needs for every read and dispatch; bytes cross as one
    buffer, and writing the stream takes ~0.1 ms in C."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def decode_table(data: bytes) -> pa.Table:
    """The table of an :func:`encode_table` stream."""
    return pa.ipc.open_stream(data).read_all()


class RayUnavailable(RuntimeError):
    """Ray is not installed, or no cluster answered at the address."""


def connect(address: str) -> bool:
    """Connect this process to the Ray cluster at ``address`` (``"auto"``: the local node's cluster). Returns True
    when this call connected (the caller disconnects at the end), False when already connected."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray on this machine and the cluster: pip install 'latscope[ray]'") from None
    if ray.is_initialized():
        return False
    _check_reachable(address)
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = "on this machine (start one with `ray start --head`)" if address == "auto" else f"at {address}"
        raise RayUnavailable(f"no Ray cluster reachable {where}: {exc}") from None
    return True


def _check_reachable(address: str) -> None:
    """Fail fast on a HOST:PORT nobody listens on (``ray.init`` would retry for minutes); other forms ("auto",
    ``ray://…``) are Ray's to resolve."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise RayUnavailable(f"no Ray cluster reachable at {address}: {exc}") from None


def disconnect() -> None:
    """Disconnect this process from the cluster."""
    import ray

    ray.shutdown()


def cluster_cpus() -> int:
    """CPUs the connected cluster offers."""
    import ray

    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return max(1, int(resources.get("CPU", 1)))


def schedule_fingerprint(config: BenchConfig, step: int, worker: int, workers: int) -> str:
    """A hash of the first arrivals (indices and offsets) worker ``worker`` sends in an open-loop step; "" for a
    closed loop (no schedule)."""
    arrival = config.steps[step]
    if not isinstance(arrival, OpenLoop):
        return ""
    digest = hashlib.sha256()
    share = Schedule(arrival, seed=config.workload.seed).share(worker, workers)
    for n, (index, offset) in enumerate(share):
        if n >= SCHEDULE_FINGERPRINT_ARRIVALS:
            break
        digest.update(f"{index}:{offset};".encode())
    return digest.hexdigest()[:16]


class StepActor:
    """One worker of one step in a Ray actor process (wrapped by ``ray.remote`` on the driver). Every method
    returns at once; the step itself runs on an event loop in a thread of its own."""

    def __init__(self, config: dict[str, Any], model: str, step: int, worker: int, workers: int) -> None:
        raise_fd_limit()
        # ``config`` is the redacted form (Ray keeps an actor's constructor arguments in its control store): the real
        # URL and headers come with :meth:`prepare`, a direct call
        self.config = BenchConfig.from_dict(config)
        self.model = model
        self.assignment = Assignment(step, worker, workers)
        self._lock = threading.Lock()
        self._batches: list[tuple[bytes, bytes]] = []  #: finished record batches, encoded (encode_table)
        self._progress: dict[str, Any] | None = None
        self._result: dict[str, Any] | None = None
        self._error: str | None = None
        self._ready = threading.Event()
        self._go = threading.Event()
        self._start_ns: int | None = None
        self._worker: StepWorker | None = None
        self._loop: Any = None
        self._thread = threading.Thread(target=self._main, name="latscope-step", daemon=True)

    # --- called by the driver ------------------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Where this actor runs: host name, Ray node id, process id."""
        import ray

        return {
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    def clock_ns(self) -> int:
        """This process's monotonic clock (a clock exchange)."""
        return time.monotonic_ns()

    def prepare(self, url: str, headers: tuple[tuple[str, str], ...]) -> dict[str, Any]:
        """Take the target's real URL and headers, create the client and settle; return once ready to start (or
        with the error)."""
        # the headers are the user's (-H, --api-key): secrets in this process too, for every message it records
        register_secret_headers(headers, by_hand=True)
        self.config = dataclasses.replace(self.config, target=self.config.target.replace(base_url=url, headers=headers))
        self._thread.start()
        ready = self._ready.wait(READY_TIMEOUT_S)
        a = self.assignment
        return {
            "ready": ready and self._error is None,
            "error": self._error or (None if ready else f"not ready after {READY_TIMEOUT_S:g} s"),
            "schedule": schedule_fingerprint(self.config, a.step, a.worker, a.workers),
        }

    def start(self, start_ns: int) -> None:
        """Start the step at ``start_ns`` on this actor's monotonic clock."""
        self._start_ns = start_ns
        self._go.set()

    def stop(self) -> None:
        """Stop dispatching now; requests in flight get the usual grace to finish."""
        self._go.set()
        worker, loop = self._worker, self._loop
        if worker is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the step is over anyway
                loop.call_soon_threadsafe(worker.stop)

    def poll(self) -> dict[str, Any]:
        """The latest counters, the record batches finished since the last poll, and the result or the error once
        the step is over (batches are handed over before the result, so the last poll has them all)."""
        with self._lock:
            result, error = self._result, self._error
            batches, self._batches = self._batches, []
            progress = self._progress
        return {"progress": progress, "batches": batches, "result": result, "error": error}

    # --- the step's own thread -----------------------------------------------------------------------------------

    def _sink(self, requests: pa.Table, events: pa.Table) -> None:
        encoded = encode_table(requests), encode_table(events)  # on the step's loop, not on Ray's thread
        with self._lock:
            self._batches.append(encoded)

    def _on_progress(self, counters: WorkerCounters) -> None:
        snapshot = counters.snapshot()
        with self._lock:
            self._progress = snapshot

    def _main(self) -> None:
        from latscope.wire.loop import run

        try:
            result = run(self._run())
            with self._lock:
                self._result = None if result is None else result.to_dict()
                if result is None:
                    self._error = "stopped before the start"
        except BaseException:
            with self._lock:
                self._error = traceback.format_exc()
            self._ready.set()

    async def _run(self) -> WorkerResult | None:
        import asyncio

        self._loop = asyncio.get_running_loop()
        worker = StepWorker(
            self.config,
            self.model,
            self.assignment,
            Path(tempfile.gettempdir()),  # nothing is written there: the record batches go to the driver
            on_progress=self._on_progress,
            sink=self._sink,
            flush_interval_s=RAY_FLUSH_INTERVAL_S,
        )
        self._worker = worker
        await worker.prepare()
        self._ready.set()
        await asyncio.get_running_loop().run_in_executor(None, self._go.wait)
        if self._start_ns is None:
            return None
        return await worker.run(self._start_ns)


@dataclass(slots=True)
class ActorState:
    """What the driver knows about one actor of a step."""

    worker: int
    handle: Any
    name: str
    identity: dict[str, Any] = field(default_factory=dict)
    clock: ClockOffset | None = None
    progress: dict[str, Any] | None = None
    result: WorkerResult | None = None
    lost_reason: str | None = None
    lost_at_ns: int | None = None  #: driver's monotonic clock, when the loss was noticed
    reported: set[int] = field(default_factory=set)
    requests_writer: pq.ParquetWriter | None = None
    events_writer: pq.ParquetWriter | None = None
    poll_ref: Any = None
    requests_lost: int = 0
    requests_not_sent: int | None = 0

    @property
    def finished(self) -> bool:
        return self.result is not None or self.lost_reason is not None

    def to_dict(self) -> dict[str, Any]:
        """The actor in ``run.json``."""
        return {
            "worker": self.worker,
            **self.identity,
            "clock": None if self.clock is None else self.clock.to_dict(),
            "state": "lost" if self.lost_reason is not None else "done",
            "lost_reason": self.lost_reason,
            "requests_lost": self.requests_lost,
            "requests_not_sent": self.requests_not_sent,
        }


class RayStep:
    """Runs one step on ``workers`` Ray actors; :meth:`run` blocks until every actor has reported or is lost."""

    def __init__(
        self, config: BenchConfig, model: str, step: int, workers: int, run_dir: Path, *, name_prefix: str = ""
    ) -> None:
        self.config = config
        self.model = model
        self.step = step
        self.workers = workers
        self.run_dir = run_dir
        self.name_prefix = name_prefix or f"latscope-{os.getpid()}-{time.monotonic_ns()}"
        self.start_ns: int | None = None  #: the common start, driver's monotonic clock
        self.actors: list[ActorState] = []
        self.interrupted = False

    def actor_name(self, worker: int) -> str:
        """The Ray name of worker ``worker``'s actor (``ray.get_actor`` finds it)."""
        return f"{self.name_prefix}-s{self.step}-w{worker}"

    def run(self, on_progress: Callable[[dict[int, dict[str, Any]]], None] | None = None) -> list[WorkerResult]:
        """Create the actors, start them on a common instant, collect their records; the actors are gone after."""
        import ray

        try:
            self._create()
            self._start()
            self._collect(on_progress)
        finally:
            for state in self.actors:
                with contextlib.suppress(Exception):
                    ray.kill(state.handle)
                for writer in (state.requests_writer, state.events_writer):
                    if writer is not None:
                        writer.close()
        return [s.result for s in self.actors if s.result is not None]

    def to_dict(self) -> dict[str, Any]:
        """The step's Ray facts for ``run.json``: each actor (host, node, clock offset, state) and what was lost."""
        lost = [s for s in self.actors if s.lost_reason is not None]
        requests_lost = sum(s.requests_lost for s in lost)
        not_sent_known = all(s.requests_not_sent is not None for s in lost)
        not_sent = sum(s.requests_not_sent or 0 for s in lost)
        recorded = sum(len(s.reported) for s in self.actors)  # the lost requests' rows included
        offered = recorded + not_sent
        return {
            "actors": [s.to_dict() for s in self.actors],
            "start_margin_ms": RAY_START_MARGIN_NS / 1e6,
            "timelines": "durations use one actor's clock; *_at_ms are from each actor's start, common to within "
            "its clock uncertainty_ms",
            "actors_lost": len(lost),
            "requests_lost": requests_lost,
            "requests_not_sent": not_sent if not_sent_known else None,
            "missing_share": (requests_lost + not_sent) / offered if offered else 0.0,
        }

    # --- phases ------------------------------------------------------------------------------------------------------

    def _create(self) -> None:
        import ray

        remote_cls = ray.remote(num_cpus=1, max_restarts=0)(StepActor)
        config_dict = self.config.to_dict()  # redacted: the real URL and headers go with prepare()
        for w in range(self.workers):
            name = self.actor_name(w)
            handle = remote_cls.options(name=name, scheduling_strategy="SPREAD").remote(
                config_dict, self.model, self.step, w, self.workers
            )
            self.actors.append(ActorState(w, handle, name))
        try:
            identities = ray.get([s.handle.identity.remote() for s in self.actors], timeout=READY_TIMEOUT_S)
        except Exception as exc:
            raise WorkerFailed(f"the Ray actors did not start: {exc}") from None
        for state, identity in zip(self.actors, identities, strict=True):
            state.identity = identity
            state.clock = measure_offset(_clock_reader(state.handle), time.monotonic_ns, DEFAULT_EXCHANGES)
        try:
            url, headers = self.config.target.base_url, self.config.target.headers
            answers = ray.get(
                [s.handle.prepare.remote(url, headers) for s in self.actors], timeout=READY_TIMEOUT_S + 10
            )
        except Exception as exc:
            raise WorkerFailed(f"the Ray actors failed to get ready: {exc}") from None
        for state, answer in zip(self.actors, answers, strict=True):
            if not answer["ready"]:
                raise WorkerFailed(f"actor {state.worker} ({state.identity.get('host')}) failed:\n{answer['error']}")
            expected = schedule_fingerprint(self.config, self.step, state.worker, self.workers)
            if answer["schedule"] != expected:
                raise WorkerFailed(
                    f"actor {state.worker} on {state.identity.get('host')} derived another arrival schedule than "
                    "the driver (different numpy?); install the same versions on every node"
                )

    def _start(self) -> None:
        self.start_ns = time.monotonic_ns() + RAY_START_MARGIN_NS
        for state in self.actors:
            assert state.clock is not None
            state.handle.start.remote(state.clock.to_worker_ns(self.start_ns))

    def _collect(self, on_progress: Callable[[dict[int, dict[str, Any]]], None] | None) -> None:
        import ray

        interrupts = 0
        stop_deadline: float | None = None
        next_poll = 0.0
        while not all(s.finished for s in self.actors):
            try:
                now = time.monotonic()
                if now >= next_poll:
                    next_poll = now + POLL_INTERVAL_S
                    for state in self.actors:
                        if not state.finished and state.poll_ref is None:
                            state.poll_ref = state.handle.poll.remote()
                waiting = [s.poll_ref for s in self.actors if s.poll_ref is not None]
                until_poll = max(0.0, next_poll - time.monotonic())
                if waiting:  # every answer, or what came by the next poll
                    ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=until_poll)
                else:
                    ready = []
                    time.sleep(until_poll)
                done = {r.hex() for r in ready}
                for state in self.actors:
                    if state.poll_ref is not None and state.poll_ref.hex() in done:
                        ref, state.poll_ref = state.poll_ref, None
                        self._take(state, ref)
                if on_progress is not None:
                    on_progress({s.worker: s.progress for s in self.actors if s.progress is not None})
                if stop_deadline is not None and time.monotonic() > stop_deadline:
                    for state in self.actors:
                        if not state.finished:
                            ray.kill(state.handle)
                    stop_deadline = None
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts > 1:
                    for state in self.actors:
                        with contextlib.suppress(Exception):
                            ray.kill(state.handle)
                    raise
                self.interrupted = True
                for state in self.actors:
                    if not state.finished:
                        state.handle.stop.remote()
                stop_deadline = time.monotonic() + STOP_WAIT_S

    def _take(self, state: ActorState, ref: Any) -> None:
        import ray

        try:
            answer = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            self._lose(state, f"RayActorError: {_first_line(exc)}")
            return
        for requests, events in answer["batches"]:
            self._write(state, decode_table(requests), decode_table(events))
        if answer["progress"] is not None:
            state.progress = answer["progress"]
        if answer["error"] is not None:
            raise WorkerFailed(f"actor {state.worker} ({state.identity.get('host')}) failed:\n{answer['error']}")
        if answer["result"] is not None:
            state.result = WorkerResult.from_dict(answer["result"])
            state.progress = state.result.counters

    def _write(self, state: ActorState, requests: pa.Table, events: pa.Table) -> None:
        if state.requests_writer is None or state.events_writer is None:
            requests_path, events_path = part_paths(self.run_dir, self.step, state.worker)
            requests_path.parent.mkdir(parents=True, exist_ok=True)
            state.requests_writer = open_part(requests_path, REQUEST_SCHEMA)
            state.events_writer = open_part(events_path, EVENT_SCHEMA)
        state.requests_writer.write_table(requests.cast(REQUEST_SCHEMA))
        state.events_writer.write_table(events.cast(EVENT_SCHEMA))
        state.reported.update(requests.column("request_id").to_pylist())

    def _lose(self, state: ActorState, reason: str) -> None:
        """Record the actor as lost: its due, unreported requests as ``worker-lost`` rows; count what it never sent."""
        state.lost_reason = reason
        state.lost_at_ns = time.monotonic_ns()
        assert state.clock is not None and self.start_ns is not None
        rows, not_sent = lost_requests(
            self.config,
            self.step,
            state.worker,
            self.workers,
            start_ns=state.clock.to_worker_ns(self.start_ns),
            lost_at_ns=state.clock.to_worker_ns(state.lost_at_ns),
            dispatched=int((state.progress or {}).get("dispatched", 0)),
            reported=state.reported,
            reason=reason,
        )
        state.requests_lost = len(rows)
        state.requests_not_sent = not_sent
        if rows:
            requests, events = build_tables(rows)
            self._write(state, requests, events)


def lost_requests(
    config: BenchConfig,
    step: int,
    worker: int,
    workers: int,
    *,
    start_ns: int,
    lost_at_ns: int,
    dispatched: int,
    reported: set[int],
    reason: str,
) -> tuple[list[tuple[Timeline, RequestContext]], int | None]:
    """The rows of a lost worker's requests that were due by ``lost_at_ns`` and never reported, and how many of its
    arrivals were never sent (None for a closed loop: its load depends on the server). Times on the worker's clock.

    Open loop: its share of the schedule, admitted as the worker admits (warm-up, request and time bounds), is due when
    its arrival is before the loss. Closed loop: the first ``dispatched`` requests of its share (its last counters)."""
    arrival = config.steps[step]
    plan = Plan(config.workload)
    items = plan.iterate(start=worker, stride=workers)
    due: list[tuple[int | None, Any]] = []  # (scheduled offset ns, planned request)
    not_sent: int | None = 0
    if isinstance(arrival, ClosedLoop):
        for _ in range(dispatched):
            due.append((None, next(items)))
        not_sent = None
    else:
        warmup_end = int(config.warmup_s * 1e9)
        end = None if config.duration_s is None else warmup_end + int(config.duration_s * 1e9)
        total = config.measured_requests
        quota = None if total is None else split_evenly(total, worker, workers)
        measured = 0
        schedule = Schedule(arrival, seed=config.workload.seed).share(worker, workers)
        for (index, offset), item in zip(schedule, items, strict=False):
            if end is not None and offset >= end:
                break
            warm = index < config.warmup_requests or offset < warmup_end
            if not warm:
                if quota is not None and measured >= quota:
                    break
                measured += 1
            if start_ns + offset <= lost_at_ns:
                due.append((offset, item))
            else:
                not_sent = (not_sent or 0) + 1
    rows: list[tuple[Timeline, RequestContext]] = []
    for at, item in due:
        if item.request_id in reported:
            continue
        t = Timeline()
        t.scheduled_ns = None if at is None else start_ns + at
        t.started_ns = start_ns if at is None else start_ns + at
        t.error = RequestError(t.phase_reached(), ErrorKind.WORKER_LOST, reason, lost_at_ns)
        warm = item.request_id < config.warmup_requests or (at is not None and at < int(config.warmup_s * 1e9))
        ctx = RequestContext(
            step=step,
            request_id=item.request_id,
            worker=worker,
            class_name=item.class_name,
            warmup=warm,
            step_start_ns=start_ns,
            planned_prompt_tokens=item.prompt_tokens,
        )
        rows.append((t, ctx))
    return rows, not_sent


def _clock_reader(handle: Any) -> Callable[[], int]:
    import ray

    def read() -> int:
        return int(ray.get(handle.clock_ns.remote()))

    return read


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
