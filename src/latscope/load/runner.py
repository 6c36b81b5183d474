"""One worker's part of one step, on one event loop: dispatch requests on schedule, record every timeline.

The worker owns a :class:`~latscope.wire.Client` (its own connection pool), a
:class:`~latscope.runs.storage.PartWriter` and a :class:`~latscope.load.health.HealthMonitor`. It takes its share of
the step's global plan — indices ``worker, worker + workers, …`` — and, from the common ``start_ns``:

* closed loop: ``concurrency`` ÷ ``workers`` users, each building its next request, then sending it at once
  (``scheduled_ns`` = the moment the user was ready, so client queue time shows only client-side delay);
* open loop: one dispatcher that builds the next request *before* its deadline, waits with
  :func:`~latscope.load.pacing.sleep_until` on the absolute deadline, records how late it woke (schedule lag) and
  starts the request as a task. With ``max_concurrency`` the task waits for a slot; that wait is client queue time.

With ``retries`` (or ``idempotency_keys``) each planned request is a *logical* request sent through
:func:`~latscope.wire.retry.request_with_retries`: its attempts and the waits between them happen inside its own task
(a closed-loop user waits for them; an open-loop dispatcher does not, so the schedule's next arrival is never moved),
it holds its concurrency slot through them, and it is recorded once, as its last attempt with the earlier ones.

Warm-up: a request is warm-up when its global index is below ``warmup_requests`` or it was scheduled less than
``warmup_s`` after the start; bounds (``requests``, ``duration_s``) count only measured requests and run from the end
of the warm-up. When dispatching ends, requests in flight may finish for ``drain_s`` (None: no limit); the rest are
cancelled and recorded as errors of kind "cancelled" — every request that started is in the tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from latscope.dialects.base import RequestSpec
from latscope.dialects.prompts import synthetic_prompt
from latscope.load.arrivals import ClosedLoop, OpenLoop, Schedule
from latscope.load.config import BenchConfig, split_evenly
from latscope.load.health import OFF_CPU_MIN_NS, HealthMonitor, WorkerHealth
from latscope.load.pacing import SPIN, sleep_until
from latscope.load.tuning import StepTuning
from latscope.load.workload import Plan, PlannedRequest, prompt_seed
from latscope.quietgc import rss_bytes
from latscope.runs.records import RequestContext
from latscope.runs.storage import BatchSink, PartWriter
from latscope.timeline.model import ErrorKind, Timeline
from latscope.wire import Client
from latscope.wire.errors import fail_unfinished
from latscope.wire.kstamps import CLOCK
from latscope.wire.retry import request_with_retries

#: How often a worker reports its counters (s): smooth enough for a live display, negligible cost.
PROGRESS_INTERVAL_S = 0.5

#: TTFTs kept for the live display's running percentiles (the report uses every request).
RECENT_TTFT = 512

#: Pool size of an open loop without a concurrency cap: no client-side limit on connections.
UNCAPPED_POOL = 1 << 20

#: Closed-loop users started per event-loop turn. A user's first step builds a request and opens a connection
#: (~0.2 ms); thousands started in one turn would stall the loop for a second, reads unstamped meanwhile.
USER_START_BATCH = 64

#: Grace for in-flight requests after an external stop (Ctrl-C) before they are cancelled, s.
STOP_GRACE_S = 1.0


class RequestBuilder:
    """Builds the bytes of each planned request in the run's dialect."""

    def __init__(self, config: BenchConfig, model: str) -> None:
        self.config = config
        self.model = model
        self.seed = config.workload.seed
        self.dialect = config.target.dialect

    def build(self, p: PlannedRequest) -> RequestSpec:
        """The request for ``p``: its file prompt, or a synthetic prompt of ``p.prompt_tokens`` words."""
        cfg = self.config
        content: Any
        if p.messages is not None:
            content = p.messages
        elif p.prompt is not None:
            content = p.prompt
        else:
            content = synthetic_prompt(p.prompt_tokens or 1, seed=prompt_seed(self.seed, p.request_id))
        extra = dict(cfg.extra_body) if cfg.extra_body else None
        try:
            return self.dialect.build_request(
                self.model, content, p.max_tokens, temperature=cfg.temperature, ignore_eos=p.ignore_eos, extra=extra
            )
        except ValueError as exc:
            raise ValueError(f"request {p.request_id}: {exc}") from None


@dataclass(slots=True)
class WorkerCounters:
    """Live counters of one worker in one step (what the progress display shows)."""

    worker: int
    dispatched: int = 0
    completed: int = 0  #: finished requests, warm-up included
    ok: int = 0  #: measured requests that succeeded
    errors: int = 0  #: measured requests that failed
    warmup: int = 0  #: warm-up requests finished
    in_flight: int = 0
    output_tokens: int = 0  #: measured, successful
    ttft_recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TTFT))

    def snapshot(self) -> dict[str, Any]:
        """A picklable copy for the parent process."""
        return {
            "worker": self.worker,
            "dispatched": self.dispatched,
            "completed": self.completed,
            "ok": self.ok,
            "errors": self.errors,
            "warmup": self.warmup,
            "in_flight": self.in_flight,
            "output_tokens": self.output_tokens,
            "ttft_recent": list(self.ttft_recent),
        }


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """What a worker reports when its part of a step is done."""

    step: int
    worker: int
    counters: dict[str, Any]
    health: WorkerHealth
    pool: dict[str, dict[str, int]]  #: the client's pool statistics per origin
    requests_written: int
    events_written: int
    stopped: bool  #: True when an external stop ended it early
    #: with kernel stamps: how this worker put them on the monotonic clock (:class:`~latscope.wire.kstamps.ClockReport`
    #: as a dict: the realtime↔monotonic offset at the first and latest measurement, drift, uncertainty); None without
    clock: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Picklable / JSON-ready form."""
        return {
            "step": self.step,
            "worker": self.worker,
            "counters": self.counters,
            "health": self.health.to_dict(),
            "pool": self.pool,
            "requests_written": self.requests_written,
            "events_written": self.events_written,
            "stopped": self.stopped,
            "clock": self.clock,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerResult:
        """Inverse of :meth:`to_dict`."""
        return cls(
            step=int(data["step"]),
            worker=int(data["worker"]),
            counters=dict(data["counters"]),
            health=WorkerHealth.from_dict(data["health"]),
            pool=dict(data["pool"]),
            requests_written=int(data["requests_written"]),
            events_written=int(data["events_written"]),
            stopped=bool(data["stopped"]),
            clock=data.get("clock"),
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """Which part of which step a worker runs: indices ``worker, worker + workers, …`` of step ``step``."""

    step: int
    worker: int
    workers: int


async def busy_poll(health: WorkerHealth) -> None:
    """Keep the loop turning: each turn polls the sockets with a zero timeout, so a read is stamped as soon as the
    kernel has it instead of after the process is woken from ``epoll_wait`` (tens to hundreds of µs on a busy or
    power-saving machine). Costs one core per worker; counted as pacing spin by the health monitor.

    It also sees the machine take the CPU away: a turn that took :data:`~latscope.load.health.OFF_CPU_MIN_NS` longer
    than the thread's own CPU time in it means the thread was not running (preempted, a virtual CPU descheduled);
    each such window goes to ``health`` (reads arriving in it are stamped at its end, whatever the client)."""
    clock = time.monotonic_ns
    cpu_clock = time.thread_time_ns
    min_off = OFF_CPU_MIN_NS
    wall, cpu = clock(), cpu_clock()
    first = wall
    try:
        while True:
            await asyncio.sleep(0)
            now, now_cpu = clock(), cpu_clock()
            off = (now - wall) - (now_cpu - cpu)
            if off > min_off:
                health.add_off_cpu(wall, now, off)
            SPIN.spin_ns += now - wall
            wall, cpu = now, now_cpu
    finally:
        health.polled_ns += clock() - first


class StepWorker:
    """Runs one worker's share of one step: create, ``await prepare()`` (client, files, garbage collection — the
    slow parts, before the clock starts), then ``await run(start_ns)``; ``stop()`` ends it early."""

    def __init__(
        self,
        config: BenchConfig,
        model: str,
        assignment: Assignment,
        run_dir: Path,
        *,
        on_progress: Callable[[WorkerCounters], None] | None = None,
        plan: Plan | None = None,
        writer_threaded: bool = True,
        sink: BatchSink | None = None,
        flush_interval_s: float | None = None,
    ) -> None:
        self.config = config
        self.assignment = assignment
        self.arrival = config.steps[assignment.step]
        self.builder = RequestBuilder(config, model)
        self.plan = plan or Plan(config.workload)
        self.run_dir = run_dir
        self.on_progress = on_progress
        self.writer_threaded = writer_threaded
        self.sink = sink  #: record batches go here instead of the part files (:class:`PartWriter`)
        self.flush_interval_s = flush_interval_s
        self.counters = WorkerCounters(assignment.worker)
        self._stopping = False
        self._stopped_externally = False
        self._dispatch_done = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._users: list[asyncio.Task[None]] = []
        self._dispatcher: asyncio.Task[None] | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._writer: PartWriter | None = None
        self._client: Client | None = None
        self._tuning = StepTuning()
        self._retry_policy = config.retry_policy
        # the backoff jitter: one stream per worker and step, from the run's seed, so a rerun draws the same waits
        self._retry_rng = random.Random(f"retry-{config.workload.seed}-{assignment.step}-{assignment.worker}")

        a, cfg = assignment, config
        self.start_ns = 0
        self.warmup_end_ns = 0
        self.end_ns: int | None = None
        total = cfg.measured_requests
        self.quota = None if total is None else split_evenly(total, a.worker, a.workers)
        self.measured = 0

    # --- control ----------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """End dispatching now; in-flight requests get :data:`STOP_GRACE_S` to finish."""
        self._stopped_externally = True
        self._stopping = True
        self._dispatch_done.set()
        if self._dispatcher is not None:
            self._dispatcher.cancel()

    def _pool_size(self) -> int:
        a = self.assignment
        if isinstance(self.arrival, ClosedLoop):
            return max(1, split_evenly(self.arrival.concurrency, a.worker, a.workers))
        if self.arrival.max_concurrency is not None:
            return max(1, split_evenly(self.arrival.max_concurrency, a.worker, a.workers))
        return UNCAPPED_POOL

    # --- the run ----------------------------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Create the client and the part files and settle the garbage collector. Idempotent."""
        if self._client is not None:
            return
        cfg, a = self.config, self.assignment
        self._client = cfg.target.client(max_connections_per_origin=self._pool_size())
        self._writer = PartWriter(
            self.run_dir,
            a.step,
            a.worker,
            threaded=self.writer_threaded,
            sink=self.sink,
            flush_interval_s=self.flush_interval_s,
        )
        self._tuning.enter(rss_bytes())

    async def run(self, start_ns: int) -> WorkerResult:
        """Run the step's share from ``start_ns`` (monotonic ns); return the result (also after :meth:`stop`)."""
        await self.prepare()
        assert self._client is not None and self._writer is not None
        client, writer = self._client, self._writer
        cfg, a = self.config, self.assignment
        self.start_ns = start_ns
        self.warmup_end_ns = start_ns + int(cfg.warmup_s * 1e9)
        self.end_ns = None if cfg.duration_s is None else self.warmup_end_ns + int(cfg.duration_s * 1e9)
        monitor = HealthMonitor(a.worker, tuning=self._tuning)
        CLOCK.reset()  # this step's offset report starts afresh
        loop = asyncio.get_running_loop()
        reporter = loop.create_task(self._report(), name="latscope-progress")
        poller = loop.create_task(busy_poll(monitor.health), name="latscope-busy-poll") if cfg.busy_poll else None
        try:
            await sleep_until(start_ns, cfg.spin_us * 1000)
            monitor.start()
            if isinstance(self.arrival, ClosedLoop):
                await self._closed_loop(self.arrival)
            else:
                await self._open_loop(self.arrival)
        finally:
            health = await monitor.stop()
            for task in (reporter, poller):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await client.aclose()
            writer.close()
            self._tuning.exit()
            if self.on_progress is not None:
                self.on_progress(self.counters)
        pool = {origin: {k: int(v) for k, v in vars_of(stats).items()} for origin, stats in client.stats().items()}
        return WorkerResult(
            step=a.step,
            worker=a.worker,
            counters=self.counters.snapshot(),
            health=health,
            pool=pool,
            requests_written=writer.requests_written,
            events_written=writer.events_written,
            stopped=self._stopped_externally,
            clock=None if (report := CLOCK.report()) is None else report.to_dict(),
        )

    async def _report(self) -> None:
        if self.on_progress is None:
            return
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            self.on_progress(self.counters)

    def _admit(self, request_id: int, scheduled_ns: int) -> bool | None:
        """Warm-up (True), measured (False), or None when the bounds say to stop dispatching."""
        if self._stopping:
            return None
        if self.end_ns is not None and scheduled_ns >= self.end_ns:
            return None
        if request_id < self.config.warmup_requests or scheduled_ns < self.warmup_end_ns:
            return True
        if self.quota is not None and self.measured >= self.quota:
            return None
        self.measured += 1
        return False

    async def _closed_loop(self, arrival: ClosedLoop) -> None:
        a = self.assignment
        users = split_evenly(arrival.concurrency, a.worker, a.workers)
        items = self.plan.iterate(start=a.worker, stride=a.workers)
        self._users = []
        for i in range(users):
            if i and i % USER_START_BATCH == 0:
                await asyncio.sleep(0)  # let the loop stamp reads between batches of first steps
            self._users.append(asyncio.create_task(self._user(items), name=f"latscope-user-{i}"))
        timeout = None if self.end_ns is None else max(0.0, (self.end_ns - time.monotonic_ns()) / 1e9)
        if self._users:
            # Dispatching ends when the first user runs out of requests (quota, stop) or at the end of the duration;
            # the other users then finish the request they are in (the drain) and start no other.
            waiter = asyncio.create_task(self._dispatch_done.wait())
            await asyncio.wait([waiter], timeout=timeout)
            waiter.cancel()
        self._stopping = True
        await self._drain(self._users)

    async def _user(self, items: Iterator[PlannedRequest]) -> None:
        while not self._stopping:
            item = next(items, None)
            if item is None:
                break
            spec = self.builder.build(item)
            ready_ns = time.monotonic_ns()
            warm = self._admit(item.request_id, ready_ns)
            if warm is None:
                break
            await self._one(item, spec, ready_ns, None, warm)
        self._dispatch_done.set()

    async def _open_loop(self, arrival: OpenLoop) -> None:
        a = self.assignment
        if arrival.max_concurrency is not None:
            self._semaphore = asyncio.Semaphore(split_evenly(arrival.max_concurrency, a.worker, a.workers))
        self._dispatcher = asyncio.create_task(self._dispatch(arrival), name="latscope-dispatcher")
        with contextlib.suppress(asyncio.CancelledError):
            await self._dispatcher
        self._stopping = True
        await self._drain(self._tasks)

    async def _dispatch(self, arrival: OpenLoop) -> None:
        a = self.assignment
        spin_ns = self.config.spin_us * 1000
        schedule = Schedule(arrival, seed=self.config.workload.seed).share(a.worker, a.workers)
        items = self.plan.iterate(start=a.worker, stride=a.workers)
        for (index, offset_ns), item in zip(schedule, items, strict=False):
            if item.request_id != index:  # both walk the same indices; a mismatch would be a bug here
                raise RuntimeError(f"plan and schedule disagree at {index} / {item.request_id}")
            deadline = self.start_ns + offset_ns
            warm = self._admit(index, deadline)
            if warm is None:
                break
            spec = self.builder.build(item)  # before the deadline, so building is not schedule lag
            lag_ns = await sleep_until(deadline, spin_ns)
            task = asyncio.create_task(self._one(item, spec, deadline, lag_ns, warm))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._dispatch_done.set()

    async def _drain(self, tasks: set[asyncio.Task[None]] | list[asyncio.Task[None]]) -> None:
        pending = [t for t in tasks if not t.done()]
        if not pending:
            return
        limit = STOP_GRACE_S if self._stopped_externally else self.config.drain_s
        _, still = await asyncio.wait(pending, timeout=limit)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still)

    async def _one(
        self, item: PlannedRequest, spec: RequestSpec, scheduled_ns: int, lag_ns: int | None, warm: bool
    ) -> None:
        """Send one request and record it, whatever happens (cancellation included)."""
        assert self._client is not None and self._writer is not None
        c = self.counters
        c.dispatched += 1
        c.in_flight += 1
        t = Timeline()
        t.scheduled_ns = scheduled_ns
        try:
            if self._semaphore is not None:
                async with self._semaphore:
                    await self._send(spec, item, scheduled_ns, t)
            else:
                await self._send(spec, item, scheduled_ns, t)
        except asyncio.CancelledError:
            # Cancelled by the drain limit or a stop: keep what was measured, name where it was cut off.
            fail_unfinished(t, ErrorKind.CANCELLED, "cancelled when the step ended")
        except Exception as exc:  # the client records request failures itself; this is a bug, kept as a record
            fail_unfinished(t, ErrorKind.INTERNAL, f"client error: {exc!r}")
        finally:
            c.in_flight -= 1
        ctx = RequestContext(
            step=self.assignment.step,
            request_id=item.request_id,
            worker=self.assignment.worker,
            class_name=item.class_name,
            warmup=warm,
            step_start_ns=self.start_ns,
            schedule_lag_ns=lag_ns,
            planned_prompt_tokens=item.prompt_tokens,
        )
        digest = self._writer.add(t, ctx)
        c.completed += 1
        if warm:
            c.warmup += 1
        elif digest.ok:
            c.ok += 1
            c.output_tokens += digest.output_tokens
            if digest.ttft_ms is not None:
                c.ttft_recent.append(digest.ttft_ms)
        else:
            c.errors += 1

    async def _send(self, spec: RequestSpec, item: PlannedRequest, scheduled_ns: int, t: Timeline) -> None:
        assert self._client is not None
        policy = self._retry_policy
        if policy.retries or policy.idempotency_keys:
            # the retries run inside this request's task: the dispatcher's next arrival is not moved by them
            await request_with_retries(
                self._client,
                spec,
                self.config.target.base_url,
                policy,
                rng=self._retry_rng,
                new_connection=self.config.new_connection_per_request,
                label=item.class_name,
                scheduled_ns=scheduled_ns,
                timeline=t,
            )
            return
        await self._client.request(
            spec,
            self.config.target.base_url,
            new_connection=self.config.new_connection_per_request,
            label=item.class_name,
            scheduled_ns=scheduled_ns,
            timeline=t,
        )


def vars_of(obj: Any) -> dict[str, Any]:
    """Fields of a dataclass instance (slots or not) as a dict."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
