"""The lab's engine core: scheduling decisions and step accounting for a simulated LLM engine, sans I/O.

:class:`EngineCore` is the state machine of a continuous-batching engine (vLLM-like). It never reads a clock and
never awaits: the caller passes the time in, asks for the next step with :meth:`EngineCore.plan`, lets the step's
cost elapse however it likes (real time in :class:`latscope.lab.scheduler.Scheduler`, instantly in a simulation)
and reports its end with :meth:`EngineCore.complete`. Queueing, head-of-line blocking, batching effects and
preemptions are consequences of these decisions; nothing in here adds delay to a particular request.

A request's life: ``WINDOW`` (held by the dynamic batching window, when one is configured) → ``WAITING`` (in the
queue) → ``PREFILLING`` (admitted: KV blocks reserved for its prompt, prefill running, possibly in chunks) →
``DECODING`` (one token per step) → ``FINISHED``. A preempted sequence goes back to ``WAITING`` at the front of the
queue, loses its KV blocks and recomputes its prompt plus the tokens generated so far when readmitted (vLLM's
recompute preemption); the tokens it already streamed are not sent again.

Policies:

- ``FIFO``: admission strictly in arrival order (the head blocks everyone behind it); a prefill step prefills whole
  prompts (no chunking) and pauses decoding; several queued prompts share one prefill step up to
  ``max_batched_tokens``, the head always runs whole.
- ``PRIORITY``: waiting requests ordered shortest prompt first (preempted ones first of all); every step may carry
  up to ``chunk_tokens`` prompt tokens (chunked prefill), shortest remaining prompts first, interleaved with one
  decode token for every running sequence (a "mixed" step).

Admission needs a free slot (``max_batch``) and KV blocks for the prompt plus the token the prefill produces, minus
a small watermark (:data:`ADMISSION_WATERMARK`) kept free so decoding can grow without immediate preemption. When a
decoding sequence needs a new block and none is free, the most recently admitted sequence is preempted.

Known simplifications: blocks for a whole prompt are reserved at admission, where vLLM allocates them chunk by
chunk (the lab never deadlocks on half-prefilled prompts, at the price of slightly earlier KV pressure); a mixed
step costs its prefill plus its decode, bases included, where one fused forward pass shares some of them; and
shortest-first has no aging, so under sustained overload long prompts can starve, the policy's known cost.
"""

from __future__ import annotations

import collections
import enum
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from latscope.lab.costmodel import CostModel
from latscope.lab.prefixcache import PrefixCache
from latscope.lab.textgen import seed_for, token_text
from latscope.units import NS_PER_MS

log = logging.getLogger(__name__)


ADMISSION_WATERMARK = 0.01
"""Fraction of KV blocks admission leaves free for decode growth (vLLM's default ``watermark``); waived when
nothing is running, so a request that fits the cache alone always runs."""

RECENT_STEPS_KEPT = 64
"""Recent step durations kept for :meth:`latscope.lab.scheduler.Scheduler.injected_cost`."""

RECENT_REQUESTS_KEPT = 256
"""Recent requests whose modelled prefill cost is kept for :meth:`latscope.lab.scheduler.Scheduler.injected_cost`."""


class Policy(enum.StrEnum):
    """Scheduling policy: ``fifo`` reproduces queue head-of-line blocking, ``priority`` is the tuned server."""

    FIFO = "fifo"
    PRIORITY = "priority"


class GenerationError(Exception):
    """A request ended without all its tokens: the engine failed it or was stopped. Raised from the stream."""


class RequestTooLarge(ValueError):
    """The request can never fit the KV cache, even alone (prompt + max_tokens > cache capacity)."""


@dataclass
class GenerationRequest:
    """One request as the gateway hands it to the scheduler.

    Fields:
        request_id: the gateway's id (used for logs and for the default text seed).
        prompt_tokens: prompt length in tokens (lab tokenizer), >= 1.
        max_tokens: tokens to generate, >= 1; the lab always generates exactly this many (finish reason "length").
        seed: token-text seed; None derives one from the scheduler's seed and ``request_id``.
        arrived_ns: monotonic ns at which the gateway received the request (0 = now, at submit).
        sampled: the slower sampling paths it asks for (:data:`~latscope.lab.costmodel.SAMPLING_PATHS`): its decode
            steps pay :attr:`CostModel.sampling_ms` when one of them runs on the host.
        prefix_blocks: the chained names of its prompt's full blocks (:func:`latscope.lab.prefixcache.prompt_blocks`),
            what the prefix cache finds it by; () for none.
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    seed: int | None = None
    arrived_ns: int = 0
    sampled: frozenset[str] = frozenset()
    prefix_blocks: tuple[int, ...] = ()


class TokenOut(NamedTuple):
    """One generated token.

    Fields:
        index: position in the completion, 0-based.
        text: the token's text (a short word with a leading space).
        ready_ns: monotonic ns at which the engine step that produced it ended.
        finish_reason: "length" on the last token, None before.
    """

    # The field shadows tuple.index(); the gateway's API names it so, and nobody calls tuple.index on a token.
    index: int  # type: ignore[assignment]
    text: str
    ready_ns: int
    finish_reason: str | None


@dataclass(slots=True)
class RequestStats:
    """What the engine knows about one request's timeline (monotonic ns; None until it happened).

    Fields:
        request_id, prompt_tokens: as submitted.
        completion_tokens: tokens generated so far.
        arrived_ns: gateway receipt (the front-end arrival TTFT and e2e are measured from).
        queued_ns: entry into the scheduler.
        scheduled_ns: first admission (start of its first prefill step).
        first_token_ns: end of the step that produced its first token.
        finished_ns: end of its last step, or the moment it was cancelled or failed.
        preemptions: times it lost its KV blocks and was put back in the queue.
        cancelled: the client went away (or the scheduler stopped) before the last token.
        window_wait_ns: time the dynamic batching window held it (included in the queue time).
        error: why the engine failed it, None otherwise.
        cached_tokens: prompt tokens its first admission found in the prefix cache (their prefill skipped).
    """

    request_id: str
    prompt_tokens: int
    completion_tokens: int = 0
    arrived_ns: int = 0
    queued_ns: int = 0
    scheduled_ns: int | None = None
    first_token_ns: int | None = None
    finished_ns: int | None = None
    preemptions: int = 0
    cancelled: bool = False
    window_wait_ns: int = 0
    error: str | None = None
    cached_tokens: int = 0

    @property
    def queue_ms(self) -> float | None:
        """Time in the queue: first scheduled − queued, ms (vLLM's ``request_queue_time``)."""
        return None if self.scheduled_ns is None else (self.scheduled_ns - self.queued_ns) / NS_PER_MS

    @property
    def prefill_ms(self) -> float | None:
        """First token − first scheduled, ms; includes waiting again after a preemption."""
        if self.first_token_ns is None or self.scheduled_ns is None:
            return None
        return (self.first_token_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def decode_ms(self) -> float | None:
        """Last token − first token, ms (None until finished)."""
        if self.finished_ns is None or self.first_token_ns is None:
            return None
        return (self.finished_ns - self.first_token_ns) / NS_PER_MS

    @property
    def ttft_ms(self) -> float | None:
        """First token − arrival at the gateway, ms."""
        return None if self.first_token_ns is None else (self.first_token_ns - self.arrived_ns) / NS_PER_MS

    @property
    def e2e_ms(self) -> float | None:
        """Finish − arrival at the gateway, ms."""
        return None if self.finished_ns is None else (self.finished_ns - self.arrived_ns) / NS_PER_MS


class TokenSink(Protocol):
    """Where a sequence's tokens go (the request's stream)."""

    def push(self, token: TokenOut) -> None:
        """Deliver one token."""

    def close(self, error: str | None) -> None:
        """No more tokens: the request finished (``error`` None) or failed (``error`` says why)."""


class _NullSink:
    def push(self, token: TokenOut) -> None:
        pass

    def close(self, error: str | None) -> None:
        pass


class SeqState(enum.Enum):
    """Where a sequence is in its life (see the module docstring)."""

    WINDOW = "window"
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"


QueueKey = tuple[int, int, int]
StepStage = Literal["prefill", "decode", "mixed"]
EventStage = Literal["window_close", "preempt"]


class Sequence:
    """The engine's mutable record of one request (internal to the lab: the scheduler and the core share it)."""

    __slots__ = (
        "admit_key",
        "admitted_ns",
        "blocks",
        "generated",
        "max_tokens",
        "prefill_target",
        "prefilled",
        "prefix_blocks",
        "prompt_counted",
        "prompt_tokens",
        "queue_key",
        "request_id",
        "sampled",
        "seed",
        "sink",
        "state",
        "stats",
    )

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int,
        seed: int,
        stats: RequestStats,
        sink: TokenSink | None = None,
        sampled: frozenset[str] = frozenset(),
        prefix_blocks: tuple[int, ...] = (),
    ) -> None:
        self.request_id = request_id
        self.sampled = sampled
        self.prefix_blocks = prefix_blocks
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.seed = seed
        self.stats = stats
        self.sink: TokenSink = sink if sink is not None else _NullSink()
        self.state = SeqState.WAITING
        self.prefill_target = prompt_tokens  # tokens the next prefill computes: prompt + tokens already generated
        self.prefilled = 0
        self.generated = 0
        self.blocks = 0
        self.admit_key = -1
        self.admitted_ns = 0
        self.queue_key: QueueKey = (1, prompt_tokens, 0)
        self.prompt_counted = False

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, {self.state.value}, prompt={self.prompt_tokens}, "
            f"prefilled={self.prefilled}/{self.prefill_target}, generated={self.generated}/{self.max_tokens}, "
            f"blocks={self.blocks})"
        )


@dataclass(slots=True)
class Step:
    """One planned engine step.

    Fields:
        stage: "prefill", "decode" or "mixed".
        start_ns: when it starts (the time given to :meth:`EngineCore.plan`).
        cost_ns: its duration under the cost model.
        chunks: (sequence, prompt tokens it prefills in this step).
        decode: sequences that each produce one token in this step.
        tokens: prompt tokens + decode tokens processed (the iteration-tokens metric).
        waiting: requests left waiting once it was planned.
    """

    stage: StepStage
    start_ns: int
    cost_ns: int
    chunks: list[tuple[Sequence, int]]
    decode: list[Sequence]
    tokens: int
    waiting: int

    @property
    def batch_size(self) -> int:
        """Sequences in the step (prefilling or decoding)."""
        return len(self.chunks) + len(self.decode)

    def sequences(self) -> list[Sequence]:
        """Every sequence the step touches."""
        return [s for s, _ in self.chunks] + self.decode


class EngineEvent(NamedTuple):
    """A scheduling event other than a step (for the batch log).

    Fields:
        stage: "window_close" or "preempt".
        ts_ns: when it happened.
        window_id: the batching window it concerns (latest opened for a preemption).
        pending: window close: requests held; preempt: requests waiting after it.
        batch: window close: requests admitted at once; preempt: sequences still running.
        latency_ns: window close: how long the window was open; preempt: how long the victim had run.
    """

    stage: EventStage
    ts_ns: int
    window_id: int
    pending: int
    batch: int
    latency_ns: int


class StepOutcome(NamedTuple):
    """What a completed step did.

    Fields:
        finished: sequences that produced their last token.
        failed: sequences the engine failed while completing the step.
        generated_tokens: tokens produced.
        prompt_tokens: prompt tokens whose prefill completed for the first time (recomputation not counted).
    """

    finished: list[Sequence]
    failed: list[Sequence]
    generated_tokens: int
    prompt_tokens: int


@dataclass
class CoreCounters:
    """Running totals of what the core charged (for :meth:`latscope.lab.scheduler.Scheduler.injected_cost`)."""

    steps: dict[StepStage, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0, "mixed": 0})
    busy_ns: int = 0
    last_step_ns: int | None = None
    preemptions: int = 0
    window_closes: int = 0
    recent_prefill_steps_ns: collections.deque[int] = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_STEPS_KEPT)
    )
    recent_prefill_model_ms: collections.OrderedDict[str, float] = field(default_factory=collections.OrderedDict)


class EngineCore:
    """Continuous-batching engine state and policy, driven by the caller's clock (see the module docstring).

    ``batch_window_ns`` > 0 enables the dynamic batching window: the first request to arrive opens a window, and
    new requests are held (state ``WINDOW``) until ``batch_trigger`` of them are held or the window has been open
    ``batch_window_ns``; then all are released to the queue at once. Sequences already running keep decoding.
    """

    def __init__(
        self,
        policy: Policy,
        cost: CostModel,
        *,
        batch_window_ns: int = 0,
        batch_trigger: int = 1,
        record_events: bool = False,
    ) -> None:
        if batch_window_ns < 0:
            raise ValueError(f"batch window must be >= 0 ns, got {batch_window_ns}")
        if batch_trigger < 1:
            raise ValueError(f"batch trigger must be >= 1 request, got {batch_trigger}")
        self.policy = Policy(policy)
        self.cost = cost
        self.batch_window_ns = batch_window_ns
        self.batch_trigger = batch_trigger
        self.record_events = record_events
        self.events: list[EngineEvent] = []
        """Window closes and preemptions since the caller last cleared the list (filled when ``record_events``)."""
        self.counters = CoreCounters()
        self.prefix_cache = PrefixCache(cost.prefix_cache_blocks) if cost.prefix_cache_blocks else None
        """The blocks of computed prompts kept for later ones (None: no prefix caching)."""

        self._free_blocks = cost.kv_blocks
        self._watermark_blocks = int(cost.kv_blocks * ADMISSION_WATERMARK)
        self._running: dict[int, Sequence] = {}  # admit_key → seq, in admission order
        self._decoding: dict[int, Sequence] = {}
        self._prefilling: list[Sequence] = []
        self._fifo: collections.deque[Sequence] = collections.deque()
        self._heap: list[tuple[QueueKey, Sequence]] = []
        self._queued = 0  # live sequences in _fifo/_heap (cancelled ones are skipped lazily)
        self._window: list[Sequence] = []
        self._window_open_ns = 0
        self.window_id = 0
        """Number of the batching window most recently opened (0 before the first)."""
        self._admit_counter = itertools.count()
        self._arrival_counter = itertools.count()
        self._preempt_counter = itertools.count()

    # -- live state ------------------------------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Sequences admitted (prefilling or decoding)."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests not admitted: queued, held by the batching window, or preempted."""
        return self._queued + len(self._window)

    @property
    def kv_blocks_used(self) -> int:
        """KV blocks held by running sequences."""
        return self.cost.kv_blocks - self._free_blocks

    @property
    def kv_usage(self) -> float:
        """Fraction of the KV cache in use, 0–1."""
        return (self.cost.kv_blocks - self._free_blocks) / self.cost.kv_blocks

    def state_key(self) -> tuple[int, int, int]:
        """(running, waiting, KV blocks used): changes exactly when a gauge would."""
        return len(self._running), self._queued + len(self._window), self.cost.kv_blocks - self._free_blocks

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return not self._running and self.waiting == 0

    def window_deadline_ns(self) -> int | None:
        """When the open batching window expires, None when no window is open."""
        if not self._window:
            return None
        return self._window_open_ns + self.batch_window_ns

    def live_sequences(self) -> list[Sequence]:
        """Every sequence not finished: held, queued or running."""
        queued = [s for s in self._fifo if s.state is SeqState.WAITING]
        queued += [s for _, s in self._heap if s.state is SeqState.WAITING]
        return [*self._window, *queued, *self._running.values()]

    # -- requests in and out ---------------------------------------------------------------------------------------

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """Raise :class:`RequestTooLarge` for a request that could never fit the KV cache, even alone."""
        need = self.cost.kv_blocks_for(prompt_tokens + max_tokens)
        if need > self.cost.kv_blocks:
            raise RequestTooLarge(
                f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) needs {need} KV blocks of "
                f"{self.cost.kv_block_tokens} tokens; the cache holds {self.cost.kv_blocks} "
                f"({self.cost.kv_capacity_tokens} tokens)"
            )

    def add(self, seq: Sequence, now_ns: int) -> None:
        """A new request entered the scheduler at ``now_ns`` (``seq.stats.queued_ns`` is set here)."""
        self.check_fits(seq.prompt_tokens, seq.max_tokens)
        seq.stats.queued_ns = now_ns
        seq.prefill_target = seq.prompt_tokens
        seq.queue_key = (1, seq.prompt_tokens, next(self._arrival_counter))
        if self.batch_window_ns > 0:
            if not self._window:
                self.window_id += 1
                self._window_open_ns = now_ns
            seq.state = SeqState.WINDOW
            self._window.append(seq)
        else:
            self._enqueue(seq)

    def cancel(self, seq: Sequence, now_ns: int, error: str | None = None) -> bool:
        """Remove a sequence wherever it is and free its KV blocks; its stream ends (with ``error`` when given).
        Returns False when it had already finished."""
        return self._end(seq, now_ns, error, cancelled=True)

    def fail(self, seq: Sequence, now_ns: int, error: str) -> bool:
        """End a sequence with an error (its stream raises it); frees its KV blocks."""
        return self._end(seq, now_ns, error, cancelled=False)

    def _end(self, seq: Sequence, now_ns: int, error: str | None, *, cancelled: bool) -> bool:
        if seq.state is SeqState.FINISHED:
            return False
        self._remove_live(seq)
        if cancelled:
            seq.stats.cancelled = True
        else:
            seq.stats.error = error
        seq.stats.finished_ns = now_ns
        seq.sink.close(error)
        return True

    # -- planning --------------------------------------------------------------------------------------------------

    def plan(self, now_ns: int) -> Step | None:
        """Decide the step that starts at ``now_ns``: admissions, preemptions, the batch. None when there is
        nothing to run (idle, or every waiting request is held by the batching window)."""
        closing = self._maybe_close_window(now_ns)
        step = self._plan_fifo(now_ns) if self.policy is Policy.FIFO else self._plan_priority(now_ns)
        if closing is not None:
            members, opened_ns = closing
            admitted = sum(1 for s in members if s.state is SeqState.PREFILLING and s.admitted_ns == now_ns)
            self.counters.window_closes += 1
            if self.record_events:
                self.events.append(
                    EngineEvent("window_close", now_ns, self.window_id, len(members), admitted, now_ns - opened_ns)
                )
        return step

    def _maybe_close_window(self, now_ns: int) -> tuple[list[Sequence], int] | None:
        members = self._window
        if not members:
            return None
        if len(members) < self.batch_trigger and now_ns < self._window_open_ns + self.batch_window_ns:
            return None
        self._window = []
        for seq in members:
            seq.stats.window_wait_ns = now_ns - seq.stats.queued_ns
            self._enqueue(seq)
        return members, self._window_open_ns

    def _plan_fifo(self, now_ns: int) -> Step | None:
        # Prefill first, whole prompts, strictly in arrival order: the head blocks everyone behind it.
        chunks: list[tuple[Sequence, int]] = []
        tokens = 0
        budget = self.cost.max_batched_tokens
        for _ in range(self.cost.max_batch if self._queued else 0):
            seq = self._peek()
            if seq is None:
                break
            if chunks and tokens + seq.prefill_target > budget:
                break
            if not self._can_admit(seq):
                break
            self._pop()
            self._admit(seq, now_ns)
            remaining = seq.prefill_target - seq.prefilled  # less its cached prefix
            chunks.append((seq, remaining))
            tokens += remaining
        if chunks:
            cost_ms = self.cost.prefill_base_ms + sum(self.cost.prefill_chunk_ms(s.prefilled, n) for s, n in chunks)
            return self._step("prefill", now_ns, cost_ms, chunks, [], tokens)
        batch = self._decode_batch(now_ns)
        if not batch:
            return None
        return self._step("decode", now_ns, self._decode_ms(batch), [], batch, len(batch))

    def _decode_ms(self, batch: list[Sequence]) -> float:
        """The decode part of a step over ``batch``, ms (the host's sampling cost when one of them samples)."""
        return self.cost.sampled_decode_step_ms(len(batch), frozenset().union(*(s.sampled for s in batch)))

    def _plan_priority(self, now_ns: int) -> Step | None:
        # Running sequences get their decode blocks first (preempting if needed), then the chunk budget goes to
        # the shortest prompts, waiting or already partly prefilled.
        batch = self._decode_batch(now_ns)
        cost = self.cost
        if not self._prefilling and not self._queued:
            # Steady decoding, nothing to prefill: the common step, kept short.
            if not batch:
                return None
            return self._step("decode", now_ns, self._decode_ms(batch), [], batch, len(batch))
        budget = cost.chunk_tokens
        chunks: list[tuple[Sequence, int]] = []
        partial = sorted(self._prefilling, key=_by_queue_key)
        i = 0
        admission_blocked = False
        for _ in range(budget + len(partial) + 1):  # each pass hands out >= 1 token, moves on, or blocks admission
            if budget <= 0:
                break
            waiting = None if admission_blocked else self._peek()
            current = partial[i] if i < len(partial) else None
            if waiting is not None and (current is None or waiting.queue_key < current.queue_key):
                if not self._can_admit(waiting):
                    admission_blocked = True
                    continue
                self._pop()
                self._admit(waiting, now_ns)
                seq = waiting
            elif current is not None:
                i += 1
                seq = current
            else:
                break
            take = min(budget, seq.prefill_target - seq.prefilled)
            chunks.append((seq, take))
            budget -= take
        if not chunks and not batch:
            return None
        prefill_tokens = cost.chunk_tokens - budget
        cost_ms = self._decode_ms(batch)
        if chunks:
            cost_ms += cost.prefill_base_ms + sum(cost.prefill_chunk_ms(s.prefilled, n) for s, n in chunks)
        stage: StepStage = "mixed" if chunks and batch else ("prefill" if chunks else "decode")
        return self._step(stage, now_ns, cost_ms, chunks, batch, prefill_tokens + len(batch))

    def _step(
        self,
        stage: StepStage,
        now_ns: int,
        cost_ms: float,
        chunks: list[tuple[Sequence, int]],
        decode: list[Sequence],
        tokens: int,
    ) -> Step:
        return Step(stage, now_ns, round(cost_ms * NS_PER_MS), chunks, decode, tokens, self.waiting)

    def _decode_batch(self, now_ns: int) -> list[Sequence]:
        """Every decoding sequence, each with room for one more token; preempts the most recently admitted
        sequence while a block is needed and none is free."""
        block_tokens = self.cost.kv_block_tokens
        batch: list[Sequence] = []
        preempted = False
        for seq in list(self._decoding.values()):
            if seq.state is not SeqState.DECODING:
                continue  # preempted earlier in this loop
            if seq.prompt_tokens + seq.generated >= seq.blocks * block_tokens:
                # Bounded: each preemption frees >= 1 block or removes seq itself.
                for _ in range(len(self._running)):
                    if self._free_blocks > 0:
                        break
                    victim = next(reversed(self._running.values()))
                    self._preempt(victim, now_ns)
                    preempted = True
                    if victim is seq:
                        break
                if seq.state is not SeqState.DECODING or self._free_blocks == 0:
                    continue
                seq.blocks += 1
                self._free_blocks -= 1
            batch.append(seq)
        if preempted:
            batch = [s for s in batch if s.state is SeqState.DECODING]
        return batch

    # -- completing ------------------------------------------------------------------------------------------------

    def complete(self, step: Step, end_ns: int) -> StepOutcome:
        """The step ended at ``end_ns``: advance prefills, emit tokens (``ready_ns`` = ``end_ns``), finish
        sequences. A failure in one sequence fails that sequence only."""
        counters = self.counters
        counters.steps[step.stage] += 1
        counters.busy_ns += step.cost_ns
        counters.last_step_ns = step.cost_ns
        if step.chunks:
            counters.recent_prefill_steps_ns.append(step.cost_ns)
        finished: list[Sequence] = []
        failed: list[Sequence] = []
        generated = 0
        prompt_tokens = 0
        for seq, n in step.chunks:
            if seq.state is not SeqState.PREFILLING:
                continue  # cancelled while the step ran
            try:
                seq.prefilled += n
                if seq.prefilled < seq.prefill_target:
                    continue
                self._prefilling.remove(seq)
                seq.state = SeqState.DECODING
                self._decoding[seq.admit_key] = seq
                if not seq.prompt_counted:
                    seq.prompt_counted = True
                    prompt_tokens += seq.prompt_tokens
                    self._remember_prefill_cost(seq)
                    if self.prefix_cache is not None:
                        self.prefix_cache.insert(seq.prefix_blocks)
                generated += 1
                if self._emit(seq, end_ns):
                    finished.append(seq)
            except Exception as exc:  # one broken request must not take the engine down
                log.exception("lab engine: request %s failed in a prefill step", seq.request_id)
                if self.fail(seq, end_ns, f"engine error: {exc!r}"):
                    failed.append(seq)
        for seq in step.decode:
            if seq.state is not SeqState.DECODING:
                continue
            try:
                generated += 1
                if self._emit(seq, end_ns):
                    finished.append(seq)
            except Exception as exc:
                log.exception("lab engine: request %s failed in a decode step", seq.request_id)
                if self.fail(seq, end_ns, f"engine error: {exc!r}"):
                    failed.append(seq)
        return StepOutcome(finished, failed, generated, prompt_tokens)

    def _emit(self, seq: Sequence, end_ns: int) -> bool:
        """Produce the sequence's next token; True when it was the last."""
        index = seq.generated
        seq.generated = count = index + 1
        stats = seq.stats
        stats.completion_tokens = count
        if stats.first_token_ns is None:
            stats.first_token_ns = end_ns
        last = count >= seq.max_tokens
        seq.sink.push(TokenOut(index, token_text(seq.seed, index), end_ns, "length" if last else None))
        if last:
            self._remove_live(seq)
            stats.finished_ns = end_ns
            seq.sink.close(None)
        return last

    def _remember_prefill_cost(self, seq: Sequence) -> None:
        recent = self.counters.recent_prefill_model_ms
        cached = seq.stats.cached_tokens  # the cached prefix is not computed: the rest is, attending to it
        cost = self.cost
        recent[seq.request_id] = cost.prefill_base_ms + cost.prefill_chunk_ms(cached, seq.prompt_tokens - cached)
        if len(recent) > RECENT_REQUESTS_KEPT:
            recent.popitem(last=False)

    # -- queue and KV bookkeeping ----------------------------------------------------------------------------------

    def _enqueue(self, seq: Sequence, *, front: bool = False) -> None:
        seq.state = SeqState.WAITING
        self._queued += 1
        if front:
            # Preempted sequences go first, the latest preempted at the very front (like appendleft).
            seq.queue_key = (0, -next(self._preempt_counter), 0)
        if self.policy is Policy.FIFO:
            if front:
                self._fifo.appendleft(seq)
            else:
                self._fifo.append(seq)
        else:
            heapq.heappush(self._heap, (seq.queue_key, seq))

    def _peek(self) -> Sequence | None:
        # Cancelled sequences stay in the queue until they reach its head (lazy deletion): pop them here.
        if self.policy is Policy.FIFO:
            fifo = self._fifo
            while fifo and fifo[0].state is not SeqState.WAITING:
                fifo.popleft()
            return fifo[0] if fifo else None
        heap = self._heap
        while heap and heap[0][1].state is not SeqState.WAITING:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def _pop(self) -> None:
        if self.policy is Policy.FIFO:
            self._fifo.popleft()
        else:
            heapq.heappop(self._heap)
        self._queued -= 1

    def _can_admit(self, seq: Sequence) -> bool:
        if len(self._running) >= self.cost.max_batch:
            return False
        need = self.cost.kv_blocks_for(seq.prefill_target + 1)
        if not self._running:
            return need <= self._free_blocks
        return self._free_blocks - need >= self._watermark_blocks

    def _admit(self, seq: Sequence, now_ns: int) -> None:
        need = self.cost.kv_blocks_for(seq.prefill_target + 1)  # the prompt and the token its prefill produces
        self._free_blocks -= need
        seq.blocks = need
        seq.admit_key = next(self._admit_counter)
        seq.admitted_ns = now_ns
        seq.state = SeqState.PREFILLING
        seq.prefilled = 0
        if self.prefix_cache is not None:
            # the prompt's leading blocks another prompt computed: their prefill is skipped
            seq.prefilled = self.prefix_cache.match(seq.prefix_blocks, seq.prefill_target)
        self._running[seq.admit_key] = seq
        self._prefilling.append(seq)
        if seq.stats.scheduled_ns is None:
            seq.stats.scheduled_ns = now_ns
            seq.stats.cached_tokens = seq.prefilled

    def _preempt(self, seq: Sequence, now_ns: int) -> None:
        self._release(seq)
        seq.prefill_target = seq.prompt_tokens + seq.generated  # recompute everything it had
        seq.prefilled = 0
        seq.stats.preemptions += 1
        self.counters.preemptions += 1
        self._enqueue(seq, front=True)
        if self.record_events:
            self.events.append(
                EngineEvent(
                    "preempt", now_ns, self.window_id, self.waiting, len(self._running), now_ns - seq.admitted_ns
                )
            )

    def _release(self, seq: Sequence) -> None:
        """Take a running sequence out of the batch and free its blocks."""
        self._free_blocks += seq.blocks
        seq.blocks = 0
        del self._running[seq.admit_key]
        if seq.state is SeqState.DECODING:
            del self._decoding[seq.admit_key]
        else:
            self._prefilling.remove(seq)

    def _remove_live(self, seq: Sequence) -> None:
        state = seq.state
        if state is SeqState.PREFILLING or state is SeqState.DECODING:
            self._release(seq)
        elif state is SeqState.WAITING:
            self._queued -= 1  # its queue entry is skipped when it reaches the head
        elif state is SeqState.WINDOW:
            self._window.remove(seq)
        seq.state = SeqState.FINISHED

    # -- reporting -------------------------------------------------------------------------------------------------

    def prefill_model_ms(self) -> dict[str, float]:
        """Modelled cost of each recent request's prompt prefilled alone (a + b·n + c·n²), ms, by request id."""
        return dict(self.counters.recent_prefill_model_ms)


def _by_queue_key(seq: Sequence) -> QueueKey:
    return seq.queue_key


def simulate(
    core: EngineCore,
    arrivals: Iterable[tuple[int, GenerationRequest]],
    *,
    seed: int = 0,
    sink_for: Callable[[GenerationRequest], TokenSink] | None = None,
    max_steps: int = 10_000_000,
) -> list[RequestStats]:
    """Run ``core`` on a virtual clock, instantly: the same decisions the real-time scheduler makes, without waiting.

    ``arrivals`` are ``(arrival_ns, request)`` pairs (times from 0, any order). A request arriving while a step
    runs is considered when the next step is planned, as in the real loop. ``sink_for`` gives each request a sink
    for its tokens (default: discard them). Stops when every request finished or after ``max_steps`` steps.
    Returns the requests' stats in arrival order.
    """
    pending = sorted(arrivals, key=lambda pair: pair[0])
    stats: list[RequestStats] = []
    now = 0
    i = 0
    for _ in range(max_steps):
        while i < len(pending) and pending[i][0] <= now:
            at, request = pending[i]
            i += 1
            request_seed = request.seed if request.seed is not None else seed_for(request.request_id, seed)
            record = RequestStats(request.request_id, request.prompt_tokens, arrived_ns=at, queued_ns=at)
            sink = sink_for(request) if sink_for is not None else None
            core.add(
                Sequence(
                    request.request_id,
                    request.prompt_tokens,
                    request.max_tokens,
                    request_seed,
                    record,
                    sink,
                    sampled=request.sampled,
                    prefix_blocks=request.prefix_blocks,
                ),
                at,
            )
            stats.append(record)
        step = core.plan(now)
        core.events.clear()
        if step is None:
            deadline = core.window_deadline_ns()
            if i < len(pending):
                now = max(now, pending[i][0] if deadline is None else min(deadline, pending[i][0]))
            elif deadline is not None:
                now = max(now, deadline)
            else:
                break
            continue
        now += step.cost_ns
        core.complete(step, now)
    return stats
