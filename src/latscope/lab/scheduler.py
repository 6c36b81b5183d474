"""The lab's scheduler: one engine loop that runs the simulated engine on real (monotonic) time.

:class:`Scheduler` drives :class:`latscope.lab.engine.EngineCore` (which decides every step) with an asyncio task:
plan a step, let its cost-model duration elapse, complete it, repeat; sleep when there is nothing to do. The
simulated "GPU time" is a deadline on a virtual clock:

- a step that starts at ``t`` ends at ``t + cost``; the next step starts at that deadline, not at the moment the
  loop happened to wake up, so timer overshoot does not accumulate. The virtual clock may lag real time by at most
  :data:`MAX_LAG_NS` (timer overshoot, a busy host); beyond that it resynchronises, and the engine runs late, as a
  host-bound engine does.
- asyncio timers are about a millisecond coarse, so the loop sleeps only for steps of at least
  :data:`SLEEP_THRESHOLD_NS`, or when the virtual clock has run that far ahead of real time; a timer that fires
  early is slept again, so such a step's tokens never reach the stream more than :data:`EARLY_WAKE_TOLERANCE_NS`
  before their ``ready_ns``. Sub-millisecond steps run back to back on the virtual clock and yield to the event
  loop every :data:`YIELD_INTERVAL_NS`; their tokens may reach the stream up to ``SLEEP_THRESHOLD_NS`` early.
- a step that costs nothing (the zero cost model) ends when its work is done: ``ready_ns`` is real time.

Each submitted request gets a :class:`RequestStream`: an async iterator of :class:`TokenOut` fed by the loop
through a deque; a consumer that waits costs one future per wait, not per token, and drains every token already
delivered without suspending.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from latscope.lab.batchlog import BatchLog
from latscope.lab.costmodel import CostModel
from latscope.lab.engine import (
    EngineCore,
    GenerationError,
    GenerationRequest,
    Policy,
    RequestStats,
    RequestTooLarge,
    Sequence,
    Step,
    StepOutcome,
    TokenOut,
)
from latscope.lab.metrics import LabMetrics
from latscope.lab.textgen import seed_for
from latscope.units import NS_PER_MS, NS_PER_S

__all__ = [
    "GenerationError",
    "GenerationRequest",
    "InjectedCost",
    "Policy",
    "RequestStats",
    "RequestStream",
    "RequestTooLarge",
    "Scheduler",
    "SchedulerConfig",
    "TokenOut",
]

log = logging.getLogger(__name__)


MAX_LAG_NS = 5 * NS_PER_MS
"""How far the virtual clock may fall behind real time before it resynchronises: absorbs asyncio timer overshoot
(~1 ms) and short host hiccups without stretching the simulated schedule."""

SLEEP_THRESHOLD_NS = NS_PER_MS
"""The loop sleeps only when the virtual clock is this far ahead of real time: asyncio timers are ~1 ms coarse."""

YIELD_INTERVAL_NS = 250_000
"""Longest stretch of back-to-back steps without yielding to the event loop (keeps the HTTP side responsive)."""

MAX_SLEEPS_PER_STEP = 4
"""Re-sleeps allowed when a timer fires early (uvloop rounds timers to whole milliseconds)."""

EARLY_WAKE_TOLERANCE_NS = 100_000
"""A wake-up this close to the deadline counts as on time."""


@dataclass
class SchedulerConfig:
    """How the lab schedules.

    Fields:
        policy: ``fifo`` (queue head-of-line fault) or ``priority`` (shortest first + chunked prefill: tuned).
        cost: the engine's cost model and capacity.
        batch_window_ms: dynamic batching window, ms; > 0 holds new admissions until ``batch_trigger`` requests
            wait or the window (opened by the first waiting request) expires (the "batching-window" fault).
        batch_trigger: requests that close the window early.
        seed: base seed of token text for requests that bring none.
    """

    policy: Policy = Policy.PRIORITY
    cost: CostModel = field(default_factory=CostModel.default)
    batch_window_ms: float = 0.0
    batch_trigger: int = 1
    seed: int = 0


class InjectedCost(TypedDict):
    """What the lab knows it injected: the ground truth a test or a diagnosis is checked against.

    Fields:
        policy: the scheduling policy.
        cost_model: the cost model's fields (ms, blocks, tokens).
        batch_window_ms, batch_trigger: the batching window.
        steps: engine steps run, by stage.
        simulated_busy_ms: total simulated step time, ms.
        last_step_ms: duration of the latest step, ms.
        recent_prefill_steps_ms: durations of the latest steps that carried prefill work, oldest first, ms.
        prefill_model_ms: modelled cost of each recent request's prompt prefilled alone (a + b·n + c·n²), ms.
        preemptions: sequences preempted.
        window_closes: batching windows closed.
    """

    policy: str
    cost_model: dict[str, float | int]
    batch_window_ms: float
    batch_trigger: int
    steps: dict[str, int]
    simulated_busy_ms: float
    last_step_ms: float | None
    recent_prefill_steps_ms: list[float]
    prefill_model_ms: dict[str, float]
    preemptions: int
    window_closes: int


class RequestStream:
    """The tokens of one submitted request, as an async iterator; ends after the last token.

    Iteration raises :class:`GenerationError` when the engine failed the request or the scheduler stopped.
    :meth:`cancel` (the client went away) removes the request from the queue or the batch and frees its KV blocks.
    Cancelling a task that waits on the stream does not cancel the request (a consumer may wait with a timeout to
    send keep-alives): call :meth:`cancel`.
    """

    __slots__ = ("_buffer", "_closed", "_error", "_scheduler", "_seq", "_waiter", "stats")

    def __init__(self, scheduler: Scheduler, seq: Sequence) -> None:
        self.stats: RequestStats = seq.stats
        self._scheduler = scheduler
        self._seq = seq
        self._buffer: collections.deque[TokenOut] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._error: str | None = None

    @property
    def request_id(self) -> str:
        """The request's id."""
        return self.stats.request_id

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenOut:
        buffer = self._buffer
        if buffer:
            return buffer.popleft()
        if not self._closed:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                self._waiter = None
            if buffer:
                return buffer.popleft()
        if self._error is not None:
            raise GenerationError(self._error)
        raise StopAsyncIteration

    def cancel(self) -> None:
        """The client went away: drop the request wherever it is. Idempotent; a no-op once it finished."""
        self._scheduler._cancel(self._seq)

    # -- the engine's side (TokenSink) -----------------------------------------------------------------------------

    def push(self, token: TokenOut) -> None:
        """Deliver one token (called by the engine)."""
        self._buffer.append(token)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self, error: str | None) -> None:
        """No more tokens (called by the engine); ``error`` makes iteration raise :class:`GenerationError`."""
        self._closed = True
        self._error = error
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Scheduler:
    """The lab's scheduler and simulated engine: submit requests, read their token streams.

    ``metrics`` (gauges on every state change, per-request histograms at finish) and ``batch_log`` (one record per
    step, window close and preemption) are optional.
    """

    def __init__(
        self, config: SchedulerConfig, *, metrics: LabMetrics | None = None, batch_log: BatchLog | None = None
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.batch_log = batch_log
        self._core = EngineCore(
            config.policy,
            config.cost,
            batch_window_ns=round(config.batch_window_ms * NS_PER_MS),
            batch_trigger=config.batch_trigger,
            record_events=batch_log is not None,
        )
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None
        self._stopped = False
        self._latest_arrival_ns = 0
        self._last_yield_ns = 0
        self._published: tuple[int, int, int] = (-1, -1, -1)
        self._preemptions_seen = 0

    # -- live state ------------------------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Sequences admitted (prefilling or decoding)."""
        return self._core.running

    @property
    def waiting(self) -> int:
        """Requests waiting (queued, held by the batching window, or preempted)."""
        return self._core.waiting

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV cache in use, 0–1."""
        return self._core.kv_usage

    @property
    def started(self) -> bool:
        """The engine loop is running."""
        return self._task is not None and not self._task.done()

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the engine loop (idempotent)."""
        if self._stopped:
            raise RuntimeError("this scheduler was stopped; create a new one")
        if self._task is None:
            self._last_yield_ns = time.monotonic_ns()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="latscope-lab-engine")
            self._task.add_done_callback(self._loop_ended)

    async def stop(self) -> None:
        """Stop the loop, end every live request's stream with :class:`GenerationError`, zero the gauges, flush
        the batch log. Idempotent."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        now = time.monotonic_ns()
        for seq in self._core.live_sequences():
            if self._core.cancel(seq, now, error="the lab scheduler stopped"):
                self._count_abort()
        self._publish()
        if self.batch_log is not None:
            self._drain_events()
            self.batch_log.close()

    # -- requests --------------------------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> RequestStream:
        """Queue a request; its tokens arrive on the returned stream.

        Raises ValueError for a prompt or ``max_tokens`` below 1, :class:`RequestTooLarge` (a ValueError) for a
        request that cannot fit the KV cache even alone, RuntimeError after :meth:`stop`."""
        if self._stopped:
            raise RuntimeError("the lab scheduler is stopped")
        if request.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {request.prompt_tokens}")
        if request.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {request.max_tokens}")
        self._core.check_fits(request.prompt_tokens, request.max_tokens)
        now = time.monotonic_ns()
        arrived = request.arrived_ns if 0 < request.arrived_ns <= now else now
        stats = RequestStats(request.request_id, request.prompt_tokens, arrived_ns=arrived, queued_ns=now)
        seed = request.seed if request.seed is not None else seed_for(request.request_id, self.config.seed)
        seq = Sequence(
            request.request_id,
            request.prompt_tokens,
            request.max_tokens,
            seed,
            stats,
            sampled=request.sampled,
            prefix_blocks=request.prefix_blocks,
        )
        stream = RequestStream(self, seq)
        seq.sink = stream
        self._core.add(seq, now)
        self._latest_arrival_ns = now
        self._publish()
        self._poke()
        return stream

    def _cancel(self, seq: Sequence) -> None:
        if self._core.cancel(seq, time.monotonic_ns()):
            self._count_abort()
            self._publish()
            self._poke()  # a cancelled window member may change what the idle loop waits for

    # -- ground truth ----------------------------------------------------------------------------------------------

    def injected_cost(self) -> InjectedCost:
        """What the lab injected so far (see :class:`InjectedCost`)."""
        counters = self._core.counters
        cost_model: dict[str, float | int] = asdict(self.config.cost)
        return {
            "policy": str(self._core.policy),
            "cost_model": cost_model,
            "batch_window_ms": self._core.batch_window_ns / NS_PER_MS,
            "batch_trigger": self._core.batch_trigger,
            "steps": {str(stage): n for stage, n in counters.steps.items()},
            "simulated_busy_ms": counters.busy_ns / NS_PER_MS,
            "last_step_ms": None if counters.last_step_ns is None else counters.last_step_ns / NS_PER_MS,
            "recent_prefill_steps_ms": [ns / NS_PER_MS for ns in counters.recent_prefill_steps_ns],
            "prefill_model_ms": self._core.prefill_model_ms(),
            "preemptions": counters.preemptions,
            "window_closes": counters.window_closes,
        }

    # -- the engine loop -------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        core = self._core
        clock = time.monotonic_ns
        virtual = clock()
        while True:  # ends when stop() cancels the task
            now = clock()
            if virtual < now - MAX_LAG_NS:
                virtual = now
            if virtual < self._latest_arrival_ns:
                virtual = self._latest_arrival_ns  # a step never starts before a request it may admit arrived
            try:
                step = core.plan(virtual)
            except Exception:
                log.exception("lab engine: planning a step failed; failing every live request")
                self._fail_all("the lab engine failed while scheduling", virtual)
                step = None
            self._drain_events()
            self._publish()
            if step is None:
                virtual = await self._idle(core.window_deadline_ns())
                continue
            if step.cost_ns == 0:
                end = clock()  # no simulated time: the step took what the host took
                if end - self._last_yield_ns >= YIELD_INTERVAL_NS:
                    await asyncio.sleep(0)
                    self._last_yield_ns = clock()
            else:
                end = virtual + step.cost_ns
                await self._wait_until(end, step.cost_ns)
            virtual = end
            try:
                outcome = core.complete(step, end)
            except Exception:
                log.exception("lab engine: completing a %s step failed; failing its requests", step.stage)
                for seq in step.sequences():
                    core.fail(seq, end, "the lab engine failed while running a step")
                outcome = StepOutcome([], step.sequences(), 0, 0)
            try:
                self._account(step, outcome, end)
            except Exception:  # metrics or the batch log failing must not stop the engine
                log.exception("lab engine: recording a %s step failed", step.stage)
            self._publish()

    async def _wait_until(self, deadline_ns: int, cost_ns: int) -> None:
        """Let simulated time reach ``deadline_ns``: sleep when the step is long enough for a timer (or the virtual
        clock ran far enough ahead), otherwise just yield now and then."""
        clock = time.monotonic_ns
        ahead = deadline_ns - clock()
        if ahead > EARLY_WAKE_TOLERANCE_NS and (ahead >= SLEEP_THRESHOLD_NS or cost_ns >= SLEEP_THRESHOLD_NS):
            for _ in range(MAX_SLEEPS_PER_STEP):
                await asyncio.sleep(ahead / NS_PER_S)
                ahead = deadline_ns - clock()
                if ahead <= EARLY_WAKE_TOLERANCE_NS:
                    break
                # Woke early (uvloop rounds timers to whole ms on a cached clock): ask for at least 1 ms more,
                # since a shorter timer may round to zero and fire at once.
                ahead = max(ahead, SLEEP_THRESHOLD_NS)
            self._last_yield_ns = clock()
            return
        now = clock()
        if now - self._last_yield_ns >= YIELD_INTERVAL_NS:
            await asyncio.sleep(0)
            self._last_yield_ns = clock()

    async def _idle(self, deadline_ns: int | None) -> int:
        """Wait for a submit (or cancel), or for the batching window's deadline; returns the virtual time the
        next step may start at."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._wake = waiter
        timer = None
        if deadline_ns is not None:
            timer = loop.call_later(max(0.0, (deadline_ns - time.monotonic_ns()) / NS_PER_S), _resolve, waiter)
        try:
            await waiter
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()
        self._last_yield_ns = now = time.monotonic_ns()
        if deadline_ns is not None and self._core.window_deadline_ns() == deadline_ns:
            # Timers may fire a little early: the window's expiry is the earliest the next step can start.
            return max(now, deadline_ns)
        return now

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        # The loop only ends by stop()'s cancellation; if a bug ends it otherwise, no stream may hang forever.
        if task.cancelled() or task.exception() is None:
            return
        log.error("lab engine: the engine loop died", exc_info=task.exception())
        self._fail_all("the lab engine loop died", time.monotonic_ns())
        self._publish()

    def _poke(self) -> None:
        waiter = self._wake
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- bookkeeping -----------------------------------------------------------------------------------------------

    def _account(self, step: Step, outcome: StepOutcome, end_ns: int) -> None:
        metrics = self.metrics
        if metrics is not None:
            metrics.observe_iteration(step.tokens)
            if outcome.generated_tokens:
                metrics.add_generation_tokens(outcome.generated_tokens)
            if outcome.prompt_tokens:
                metrics.add_prompt_tokens(outcome.prompt_tokens)
            for seq in outcome.finished:
                self._observe_finished(metrics, seq.stats)
            for _ in outcome.failed:
                metrics.observe_request(finished_reason="error")
        if self.batch_log is not None:
            self.batch_log.record(
                step.stage,
                ts_ns=end_ns,
                window_id=self._core.window_id,
                pending_requests=step.waiting,
                actual_batch_size=step.batch_size,
                trigger_threshold=self.config.batch_trigger,
                latency_us=step.cost_ns / 1000,
            )

    @staticmethod
    def _observe_finished(metrics: LabMetrics, stats: RequestStats) -> None:
        if stats.scheduled_ns is None or stats.first_token_ns is None or stats.finished_ns is None:
            return
        metrics.observe_request(
            finished_reason="length",
            queue_s=(stats.scheduled_ns - stats.queued_ns) / NS_PER_S,
            prefill_s=(stats.first_token_ns - stats.scheduled_ns) / NS_PER_S,
            decode_s=(stats.finished_ns - stats.first_token_ns) / NS_PER_S,
            ttft_s=(stats.first_token_ns - stats.arrived_ns) / NS_PER_S,
            e2e_s=(stats.finished_ns - stats.arrived_ns) / NS_PER_S,
        )

    def _count_abort(self) -> None:
        if self.metrics is not None:
            self.metrics.observe_request(finished_reason="abort")

    def _drain_events(self) -> None:
        core = self._core
        preemptions = core.counters.preemptions
        if preemptions != self._preemptions_seen:
            if self.metrics is not None:
                self.metrics.add_preemptions(preemptions - self._preemptions_seen)
            self._preemptions_seen = preemptions
        if not core.events:
            return
        events, core.events = core.events, []
        if self.batch_log is None:
            return
        for event in events:
            self.batch_log.record(
                event.stage,
                ts_ns=event.ts_ns,
                window_id=event.window_id,
                pending_requests=event.pending,
                actual_batch_size=event.batch,
                trigger_threshold=self.config.batch_trigger,
                latency_us=event.latency_ns / 1000,
            )

    def _publish(self) -> None:
        state = self._core.state_key()
        if state == self._published:
            return
        self._published = state
        if self.metrics is not None:
            self.metrics.set_state(state[0], state[1], self._core.kv_usage)

    def _fail_all(self, error: str, now_ns: int) -> None:
        for seq in self._core.live_sequences():
            if self._core.fail(seq, now_ns, error) and self.metrics is not None:
                self.metrics.observe_request(finished_reason="error")


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
