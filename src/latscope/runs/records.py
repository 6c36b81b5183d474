"""Timelines → rows of the run's two tables, buffered column by column.

``requests`` has one row per request (:data:`REQUEST_SCHEMA`), ``events`` one row per stream event
(:data:`EVENT_SCHEMA`). Join them on ``(step, request_id)``. Times are milliseconds (float64); ``*_at_ms`` columns
are offsets from the step's common start (requests) or from the request's own start (events); a missing metric is
NULL, never 0.

A row is a *logical* request: with ``--retries`` it may have taken several attempts. Its phase columns (setup, dns …
send, wait, the server's) are its last attempt's; ``started_at_ms``, ``client_queue_ms`` and the times to the head,
the first token and the end (``ttfb_ms``, ``ttft_ms``, ``ttft_text_ms``, ``e2e_ms``) run from its first attempt, so
they include what the retries cost, which ``retry_ms`` (and its waiting part, ``retry_wait_ms``) shows as a phase
of its own; the event ``at_ms`` offsets count from there too. ``retried`` lists the earlier attempts.

Recording is split in two: :func:`digest` reads the few O(1) numbers a live display needs when a request ends, and
:func:`build_steps` converts a whole batch of finished timelines — the server's signals joined and each request's
columns read (tens of µs a request: the Server-Timing and timing headers are parsed here), then every event of the
batch in one transposition and the per-request statistics (gaps, coalescing, counted tokens) as grouped numpy
reductions. It is a generator that yields between short steps (one request, one chunk of events, one column), so
its driver can run it on the event loop a slice at a time (:class:`~latscope.runs.storage.PartWriter`) instead of
in a second thread: a Python thread that converts holds the GIL, and the event loop's thread, waking for a read or
a dispatch, then waits for the interpreter's switch interval (5 ms) before it may stamp or send anything.
:func:`build_tables` runs the same steps at once.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from latscope.signals.join import join_server_signals
from latscope.timeline import metrics
from latscope.timeline.model import (
    TOKEN_KINDS,
    Attempt,
    EventKind,
    EventLog,
    Read,
    ServerPhase,
    StreamEvent,
    Timeline,
    as_event_log,
)
from latscope.units import NS_PER_MS

#: Every EventKind, in a fixed order: the dictionary of the ``kind`` column (events store the int8 code).
EVENT_KINDS: tuple[EventKind, ...] = tuple(EventKind)
_KIND_CODE: dict[EventKind, int] = {k: i for i, k in enumerate(EVENT_KINDS)}
_TOKEN_CODES = frozenset(_KIND_CODE[k] for k in TOKEN_KINDS)

#: The server-reported phases, each with a column of its own (``server_<phase>_ms``) in ``requests``.
SERVER_COLUMNS: tuple[ServerPhase, ...] = tuple(ServerPhase)

#: One earlier attempt of a logical request (``requests.retried``): times in ms since the step's start, like
#: ``started_at_ms``; ``wait_ms`` is what the client waited after it before the next attempt.
ATTEMPT_TYPE = pa.struct(
    [
        pa.field("attempt", pa.int32()),
        pa.field("started_at_ms", pa.float64()),
        pa.field("ended_at_ms", pa.float64()),
        pa.field("status", pa.int32()),
        pa.field("error_phase", pa.string()),
        pa.field("error_kind", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("tokens", pa.int32()),  # token events it delivered before it failed
        pa.field("retry_after_ms", pa.float64()),  # the wait the server asked for (retry-after-ms / Retry-After)
        pa.field("should_retry", pa.bool_()),  # the server's x-should-retry
        pa.field("wait_ms", pa.float64()),
        pa.field("response_id", pa.string()),  # the id its stream named (Timeline.response_id)
    ]
)

REQUEST_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int32(), nullable=False),  # index of the step (sweep point), 0 without a sweep
        pa.field("request_id", pa.int64(), nullable=False),  # global index in the step, same in every worker
        pa.field("worker", pa.int32(), nullable=False),
        pa.field("class", pa.string(), nullable=False),  # workload class (or a prompt file line's "class")
        pa.field("warmup", pa.bool_(), nullable=False),  # warm-up requests are kept here but excluded from summaries
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("scheduled_at_ms", pa.float64()),  # when it was meant to start, since the step's start
        pa.field(
            "started_at_ms", pa.float64()
        ),  # when the client started it (its first attempt), since the step's start
        pa.field("ended_at_ms", pa.float64()),
        pa.field("schedule_lag_ms", pa.float64()),  # open loop: how late the dispatcher woke for it
        pa.field("client_queue_ms", pa.float64()),  # scheduled → started (dispatch lag + concurrency-cap wait)
        # --retries: attempts sent for this logical request (1 without a retry); the row's phases are the last one's
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("retry_ms", pa.float64(), nullable=False),  # first attempt's start → last attempt's start (0: none)
        pa.field("retry_wait_ms", pa.float64(), nullable=False),  # the part of retry_ms spent waiting (backoff)
        pa.field("setup_ms", pa.float64()),  # started → connection ready (pool wait + dns + connect + tls)
        pa.field("pool_ms", pa.float64()),
        pa.field("dns_ms", pa.float64()),
        pa.field("connect_ms", pa.float64()),
        pa.field("tls_ms", pa.float64()),
        pa.field("send_ms", pa.float64()),
        pa.field("wait_ms", pa.float64()),
        pa.field("ttfb_ms", pa.float64()),
        pa.field("ttft_ms", pa.float64()),  # to the first token of any kind (text, reasoning, tool-call arguments)
        pa.field("ttft_text_ms", pa.float64()),  # to the first visible-text token (NULL when no text came)
        pa.field("tpot_ms", pa.float64()),
        pa.field("e2e_ms", pa.float64()),
        pa.field("itl_count", pa.int32(), nullable=False),  # inter-token gaps; every one is a row in ``events``
        pa.field("itl_p50_ms", pa.float64()),
        pa.field("itl_max_ms", pa.float64()),
        pa.field("prompt_tokens", pa.int32()),  # usage.prompt_tokens, else the planned synthetic length
        pa.field("prompt_tokens_source", pa.string()),  # "usage" | "planned" | NULL
        pa.field("output_tokens", pa.int32(), nullable=False),  # usage.completion_tokens, else counted from events
        pa.field("output_tokens_source", pa.string(), nullable=False),  # "usage" | "counted"
        pa.field("max_tokens", pa.int32()),
        pa.field("events", pa.int32(), nullable=False),
        pa.field("token_events", pa.int32(), nullable=False),
        pa.field("reads", pa.int32(), nullable=False),
        pa.field("coalesced_events", pa.int32(), nullable=False),  # events that came in the same read as the previous
        pa.field("max_events_per_read", pa.int32()),
        pa.field("connection_id", pa.int64()),
        pa.field("reused", pa.bool_()),
        pa.field("http_version", pa.string()),
        pa.field("status", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("error_phase", pa.string()),
        pa.field("error_kind", pa.string()),
        pa.field("error_status", pa.int32()),
        pa.field("error_message", pa.string()),
        # what the server reported (Server-Timing in headers or trailers, timing headers, body fields): NULL if nothing
        *(pa.field(f"server_{phase}_ms", pa.float64()) for phase in SERVER_COLUMNS),
        pa.field("started_ns", pa.int64(), nullable=False),  # absolute monotonic ns, to join with server-side logs
        # the W3C traceparent's trace id and parent id (the request's own span) when one was sent (--otlp)
        pa.field("trace_id", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("idempotency_key", pa.string()),  # --idempotency-keys: the key every attempt carried
        pa.field("response_id", pa.string()),  # the response's own id as its stream named it (chatcmpl-…, msg_…)
        # --retries: each earlier attempt, oldest first: what it got and the wait after it (empty without retries)
        pa.field("retried", pa.list_(ATTEMPT_TYPE), nullable=False),
        # what stamped the reads: "kernel" (kernel receive stamps, --stamps kernel) or "user"; NULL without a
        # connection. With kernel stamps, the client's own scheduling delay over the request's reads (user-space
        # stamp − kernel stamp of each read): median and 99th percentile, measured, NULL with user stamps
        pa.field("stamps", pa.string()),
        pa.field("read_delay_p50_ms", pa.float64()),
        pa.field("read_delay_p99_ms", pa.float64()),
    ]
)

EVENT_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),  # event index within the request
        pa.field("at_ms", pa.float64(), nullable=False),  # arrival (the read that completed it), since request start
        pa.field("read_index", pa.int32(), nullable=False),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("tokens", pa.int32(), nullable=False),
        pa.field("text_chars", pa.int32(), nullable=False),
        # token events: gap since the previous token event of the same kind and choice (NULL for the first of each)
        pa.field("gap_ms", pa.float64()),
        pa.field("coalesced", pa.bool_(), nullable=False),  # arrived in the same read as the previous event
        pa.field("delay_ms", pa.float64()),  # client stamp − server send stamp (lab --truth only)
        pa.field("choice", pa.int32(), nullable=False),  # the choice (n > 1) or output item; 0 for a single answer
        # kernel stamps: user-space stamp − kernel stamp of the read that completed the event (``at_ms`` is the
        # kernel's); ``delay_ms + read_delay_ms`` is what a user-space stamp would have shown. NULL with user stamps
        pa.field("read_delay_ms", pa.float64()),
    ]
)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What the load generator knows about a request besides its timeline."""

    step: int
    request_id: int
    worker: int
    class_name: str
    warmup: bool
    step_start_ns: int  #: the step's common start (monotonic ns), origin of the ``*_at_ms`` columns
    schedule_lag_ns: int | None = None  #: open loop: dispatcher lateness for this request
    planned_prompt_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RequestDigest:
    """The few numbers the live display and the worker's counters need from a finished request."""

    ok: bool
    warmup: bool
    ttft_ms: float | None
    output_tokens: int
    error_phase: str | None


def _rel_ms(at_ns: int | None, origin_ns: int) -> float | None:
    return None if at_ns is None else (at_ns - origin_ns) / NS_PER_MS


_TOKEN_CODE_LIST = sorted(_TOKEN_CODES)
_KIND_DICTIONARY = pa.array([str(k) for k in EVENT_KINDS], type=pa.string())

#: Events converted per step of :func:`build_steps`: each step's C-level work (list slices, numpy conversions) then
#: takes a few tens of µs, so a driver on the event loop can hand the loop back between steps.
CONVERT_CHUNK_EVENTS = 512

#: What :func:`build_steps` yields between its steps (nothing: a point where its driver may pause it).
Steps = Generator[None, None, tuple[pa.Table, pa.Table]]


def digest(t: Timeline, ctx: RequestContext) -> RequestDigest:
    """What the live counters need from a finished request (usage, or one cheap pass over the events)."""
    usage = t.usage
    if usage is not None and usage.completion_tokens is not None:
        tokens = usage.completion_tokens
    else:
        log = as_event_log(t.events)
        tokens = sum(n for n, kind in zip(log.tokens, log.kind, strict=True) if kind in TOKEN_KINDS)
    err = t.error
    return RequestDigest(t.ok, ctx.warmup, metrics.ttft_ms(t), tokens, str(err.phase) if err else None)


def _request_scalars(t: Timeline, ctx: RequestContext) -> tuple[Any, ...]:
    """The per-request columns that come from marks and the server's own report, in :data:`_SCALAR_COLUMNS`
    order. Joins the server's signals onto ``t`` first (tens of µs: one step of :func:`build_steps`)."""
    join_server_signals(t)
    origin = ctx.step_start_ns
    # a logical request starts with its first attempt; the row's times to the head, the first token and the end
    # run from there, so they include what the retries cost (the last attempt's phases are its own durations)
    start = t.logical_started_ns
    shift_ms = metrics.retry_ms(t)
    usage = t.usage
    if usage is not None and usage.prompt_tokens is not None:
        prompt_tokens: int | None = usage.prompt_tokens
        prompt_source: str | None = "usage"
    elif ctx.planned_prompt_tokens is not None:
        prompt_tokens, prompt_source = ctx.planned_prompt_tokens, "planned"
    else:
        prompt_tokens, prompt_source = None, None
    usage_out = usage.completion_tokens if usage is not None else None
    err = t.error
    conn = t.connection
    return (
        ctx.step,
        ctx.request_id,
        ctx.worker,
        ctx.class_name,
        ctx.warmup,
        t.ok,
        _rel_ms(t.scheduled_ns, origin),
        _rel_ms(start, origin),
        _rel_ms(t.ended_ns, origin),
        None if ctx.schedule_lag_ns is None else ctx.schedule_lag_ns / NS_PER_MS,
        None if t.scheduled_ns is None else (start - t.scheduled_ns) / NS_PER_MS,
        t.attempt,
        shift_ms,
        metrics.retry_wait_ms(t),
        metrics.setup_ms(t),
        metrics.pool_ms(t),
        metrics.dns_ms(t),
        metrics.connect_ms(t),
        metrics.tls_ms(t),
        metrics.send_ms(t),
        metrics.wait_ms(t),
        _shifted(metrics.ttfb_ms(t), shift_ms),
        _shifted(metrics.ttft_ms(t), shift_ms),
        _shifted(metrics.ttft_text_ms(t), shift_ms),
        _shifted(metrics.e2e_ms(t), shift_ms),
        prompt_tokens,
        prompt_source,
        usage_out,
        t.max_tokens,
        len(t.events),
        len(t.reads),
        None if conn is None else conn.connection_id,
        None if conn is None else conn.reused,
        None if conn is None else conn.http_version,
        t.status,
        t.finish_reason,
        None if err is None else str(err.phase),
        None if err is None else str(err.kind),
        None if err is None else err.status,
        None if err is None else err.message,
        *(t.server_ms(phase) for phase in SERVER_COLUMNS),
        start,
        t.trace_id,
        t.span_id,
        t.idempotency_key,
        t.response_id,
        [_attempt_row(a, origin) for a in t.retries],
        t.first_token_ns,
        t.last_token_ns,
    )


def _shifted(ms: float | None, shift_ms: float) -> float | None:
    return None if ms is None else ms + shift_ms


def _attempt_row(a: Attempt, origin_ns: int) -> dict[str, Any]:
    """One earlier attempt as an ``ATTEMPT_TYPE`` value."""
    err = a.error
    return {
        "attempt": a.number,
        "started_at_ms": (a.started_ns - origin_ns) / NS_PER_MS,
        "ended_at_ms": (a.ended_ns - origin_ns) / NS_PER_MS,
        "status": a.status,
        "error_phase": None if err is None else str(err.phase),
        "error_kind": None if err is None else str(err.kind),
        "error_message": None if err is None else err.message,
        "tokens": a.tokens,
        "retry_after_ms": a.retry_after_ms,
        "should_retry": a.should_retry,
        "wait_ms": a.wait_ns / NS_PER_MS,
        "response_id": a.response_id,
    }


_SCALAR_COLUMNS = (
    "step", "request_id", "worker", "class", "warmup", "ok", "scheduled_at_ms", "started_at_ms", "ended_at_ms",
    "schedule_lag_ms", "client_queue_ms", "attempts", "retry_ms", "retry_wait_ms", "setup_ms", "pool_ms", "dns_ms",
    "connect_ms", "tls_ms", "send_ms",
    "wait_ms", "ttfb_ms", "ttft_ms", "ttft_text_ms", "e2e_ms", "prompt_tokens", "prompt_tokens_source",
    "_usage_output_tokens", "max_tokens", "events", "reads", "connection_id", "reused", "http_version", "status",
    "finish_reason", "error_phase", "error_kind", "error_status", "error_message",
    *(f"server_{phase}_ms" for phase in SERVER_COLUMNS),
    "started_ns", "trace_id", "span_id", "idempotency_key", "response_id", "retried",
    "_first_token_ns", "_last_token_ns",
)  # fmt: skip


def _group_max(values: npt.NDArray[np.float64], groups: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.float64]:
    """Per group, the largest value (NaN for an empty group)."""
    out = np.full(n, -np.inf)
    np.maximum.at(out, groups, values)
    out[np.isneginf(out)] = np.nan
    return out


def _sorted_groups(
    values: npt.NDArray[np.float64], groups: npt.NDArray[np.int64], n: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``values`` sorted within their groups, group by group (one sort for the whole batch), with each group's
    start in them, its count, and whether it has any value."""
    v = values[np.lexsort((values, groups))]
    counts = np.bincount(groups, minlength=n)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return v, starts, counts, counts > 0


def _group_median(values: npt.NDArray[np.float64], groups: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.float64]:
    """Per group, the median (mean of the middle two for even counts; NaN for an empty group)."""
    out = np.full(n, np.nan)
    if values.size == 0:
        return out
    v, starts, counts, has = _sorted_groups(values, groups, n)
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    out[has] = (v[lo[has]] + v[hi[has]]) / 2
    return out


def _group_percentiles(
    values: npt.NDArray[np.float64], groups: npt.NDArray[np.int64], n: int, qs: Sequence[float]
) -> list[npt.NDArray[np.float64]]:
    """Per group, each ``q``-th percentile (0-100) of its values, as ``np.percentile`` computes it (linear
    interpolation between the closest ranks); NaN for an empty group. One sort for every group and every ``q``."""
    outs = [np.full(n, np.nan) for _ in qs]
    if values.size == 0:
        return outs
    v, starts, counts, has = _sorted_groups(values, groups, n)
    starts, last = starts[has], counts[has] - 1
    for out, q in zip(outs, qs, strict=True):
        pos = last * (q / 100)
        lo = np.floor(pos).astype(np.int64)
        t = pos - lo
        a = v[starts + lo]
        b = v[starts + np.minimum(lo + 1, last)]
        # numpy's own lerp: from the nearer end, so the result never leaves [a, b]
        out[has] = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)
    return outs


def _events_of(timelines: Sequence[Timeline]) -> Generator[None, None, tuple[npt.NDArray[Any], ...]]:
    """Every event of the batch as seven columns (at_ns, read_index, kind code, text_chars, tokens, delay_ms,
    choice), from each timeline's :class:`EventLog` columns; yields after each field and each chunk of events."""
    logs = [as_event_log(t.events).columns() for t in timelines]
    yield
    columns: list[list[Any]] = []
    for i in range(len(StreamEvent._fields)):  # field by field
        columns.append(list(chain.from_iterable(log[i] for log in logs)))
        yield
    total = len(columns[0]) if columns else 0
    parts: list[tuple[npt.NDArray[Any], ...]] = []
    for lo in range(0, total, CONVERT_CHUNK_EVENTS):
        yield
        at, read_index, kinds, chars, tokens, sent, choice = (c[lo : lo + CONVERT_CHUNK_EVENTS] for c in columns)
        at_ns = np.array(at, dtype=np.int64)
        # None → NaN in one C-level conversion. float64 holds monotonic ns exactly up to 2**53 (104 days of uptime)
        # and to within a few ns beyond: far below the microseconds this column is read at.
        delay = (at_ns.astype(np.float64) - np.array(sent, dtype=np.float64)) / NS_PER_MS
        parts.append(
            (
                at_ns,
                np.array(read_index, dtype=np.int32),
                np.fromiter(map(_KIND_CODE.__getitem__, kinds), dtype=np.int8, count=len(kinds)),
                np.array(chars, dtype=np.int32),
                np.array(tokens, dtype=np.int32),
                delay,
                np.array(choice, dtype=np.int32),
            )
        )
    if not parts:
        return (
            np.empty(0, np.int64),
            np.empty(0, np.int32),
            np.empty(0, np.int8),
            np.empty(0, np.int32),
            np.empty(0, np.int32),
            np.empty(0, np.float64),
            np.empty(0, np.int32),
        )
    del columns, logs
    yield
    return tuple(np.concatenate(cols) for cols in zip(*parts, strict=True))


#: reads whose delays one step of :func:`_read_delays` gathers (~0.1 ms here)
READ_DELAY_CHUNK = 1_024


def _read_delays(
    timelines: Sequence[Timeline],
    req: npt.NDArray[np.int64],
    read_index: npt.NDArray[np.int32],
) -> Generator[None, None, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]]:
    """Per event, the scheduling delay (ms) of the read that completed it; per request, that delay's median and 99th
    percentile over its reads. NaN wherever the read was user-stamped. The batch's kernel-stamped reads are
    transposed :data:`READ_DELAY_CHUNK` at a time (a step each), then one sort gives every request's percentiles
    (``np.percentile`` per request cost ~40 µs each)."""
    n_req = len(timelines)
    per_event = np.full(req.size, np.nan)
    kernel = [
        i for i, t in enumerate(timelines) if t.connection is not None and t.connection.stamps == "kernel" and t.reads
    ]
    if not kernel:
        return per_event, np.full(n_req, np.nan), np.full(n_req, np.nan)
    n_reads = np.zeros(n_req, dtype=np.int64)
    parts: list[npt.NDArray[np.float64]] = []
    group: list[int] = []
    taken = 0
    for i in kernel:  # about READ_DELAY_CHUNK reads a step
        n_reads[i] = len(timelines[i].reads)
        group.append(i)
        taken += int(n_reads[i])
        if taken >= READ_DELAY_CHUNK or i == kernel[-1]:
            at_ns, _nbytes, user_ns = zip(*chain.from_iterable(timelines[j].reads for j in group), strict=True)
            # a user-stamped read (a kernel that gave no stamp) has no delay: NaN, left out of the percentiles
            parts.append(np.array([np.nan if u is None else u - a for a, u in zip(at_ns, user_ns, strict=True)]))
            group, taken = [], 0
            yield
    delays = np.concatenate(parts) / NS_PER_MS
    read_req = np.repeat(np.arange(n_req, dtype=np.int64), n_reads)
    stamped = ~np.isnan(delays)
    p50, p99 = _group_percentiles(delays[stamped], read_req[stamped], n_req, (50.0, 99.0))
    start = np.concatenate(([0], np.cumsum(n_reads)[:-1]))
    has = read_index < n_reads[req]  # a user-stamped request has no reads here: its events keep NaN
    per_event[has] = delays[start[req[has]] + read_index[has]]
    return per_event, p50, p99


def build_tables(batch: Sequence[tuple[Timeline, RequestContext]]) -> tuple[pa.Table, pa.Table]:
    """The ``requests`` and ``events`` rows of a batch of finished requests (see the module docstring), at once."""
    steps = build_steps(batch)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            tables: tuple[pa.Table, pa.Table] = done.value
            return tables


def _token_gaps(
    at_ns: npt.NDArray[np.int64],
    req: npt.NDArray[np.int64],
    kind: npt.NDArray[Any],
    choice: npt.NDArray[Any],
    is_token: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Inter-token gaps: consecutive token events of the same request, kind and choice (as ``metrics.itl_ms``).
    Returns the token events' indices (grouped by request, kind and choice, each group in arrival order), the gap
    ending at each event (ms, NaN where none ends), and the gaps (ms) with the request each belongs to."""
    # a stable sort by (request, kind, choice) puts each run of one kind and choice together in arrival order
    tok = np.flatnonzero(is_token)
    tok = tok[np.lexsort((tok, choice[tok], kind[tok], req[tok]))]
    tok_req = req[tok]
    same = (tok_req[1:] == tok_req[:-1]) & (kind[tok][1:] == kind[tok][:-1]) & (choice[tok][1:] == choice[tok][:-1])
    gap_val = np.diff(at_ns[tok])[same] / NS_PER_MS
    gap = np.full(at_ns.size, np.nan)
    gap[tok[1:][same]] = gap_val
    return tok, gap, gap_val, tok_req[1:][same]


def _coalescing(
    read_index: npt.NDArray[Any], req: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Which events came in the same read as the previous event of their request, and the runs of one read: each
    run's first event and its length."""
    n_ev = read_index.size
    coalesced = np.zeros(n_ev, dtype=bool)
    if n_ev > 1:
        coalesced[1:] = (read_index[1:] == read_index[:-1]) & (req[1:] == req[:-1])
    run_start = np.flatnonzero(~coalesced)
    run_len = np.diff(np.append(run_start, n_ev)).astype(np.float64)
    return coalesced, run_start, run_len


def _tpot_ms(
    first_ns: Sequence[int | None], last_ns: Sequence[int | None], tokens: Sequence[int]
) -> list[float | None]:
    """Each request's TPOT, ms (as ``metrics.tpot_ms``), with the token count given (usage when reported, else
    counted): None without two tokens."""
    return [
        None if a is None or b is None or n < 2 else (b - a) / NS_PER_MS / (n - 1)
        for a, b, n in zip(first_ns, last_ns, tokens, strict=True)
    ]


def build_steps(batch: Sequence[tuple[Timeline, RequestContext]]) -> Steps:
    """:func:`build_tables` as a generator: it yields between steps of a few tens of µs (one request's columns, one
    chunk of events, one column) and returns the two tables. Joins the server's signals onto each timeline."""
    n_req = len(batch)
    if n_req == 0:
        return REQUEST_SCHEMA.empty_table(), EVENT_SCHEMA.empty_table()
    timelines = [t for t, _ in batch]
    rows = []
    for t, c in batch:
        rows.append(_request_scalars(t, c))
        yield
    scalars: dict[str, list[Any]] = {}
    for i, name in enumerate(_SCALAR_COLUMNS):  # a column a step: the whole transposition is ~1 ms per 1,000
        scalars[name] = [row[i] for row in rows]
        yield
    del rows

    at_ns, read_index, kind, text_chars, tokens, delay, choice = yield from _events_of(timelines)
    n_ev = at_ns.size
    counts = np.array(scalars["events"], dtype=np.int64)
    req = np.repeat(np.arange(n_req, dtype=np.int64), counts)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    yield
    read_delay, delay_p50, delay_p99 = yield from _read_delays(timelines, req, read_index)
    started = np.array(scalars["started_ns"], dtype=np.int64)
    yield
    is_token = np.isin(kind, _TOKEN_CODE_LIST)

    tok, gap, gap_val, gap_req = _token_gaps(at_ns, req, kind, choice, is_token)
    yield
    coalesced, run_start, run_len = _coalescing(read_index, req)
    yield

    token_events = np.bincount(req[tok], minlength=n_req)
    counted = np.bincount(req[tok], weights=tokens[tok], minlength=n_req).astype(np.int64)
    usage_out = scalars["_usage_output_tokens"]
    output_tokens = [int(c) if u is None else int(u) for u, c in zip(usage_out, counted, strict=True)]
    output_source = ["counted" if u is None else "usage" for u in usage_out]

    tpot = _tpot_ms(scalars["_first_token_ns"], scalars["_last_token_ns"], output_tokens)
    yield

    def nullable(arr: npt.NDArray[np.float64], typ: pa.DataType | None = None) -> pa.Array:
        return pa.array(arr, type=typ or pa.float64(), mask=np.isnan(arr))

    derived: dict[str, Any] = {
        "tpot_ms": pa.array(tpot, type=pa.float64()),
        "itl_count": pa.array(np.bincount(gap_req, minlength=n_req).astype(np.int32)),
        "itl_p50_ms": nullable(_group_median(gap_val, gap_req, n_req)),
    }
    yield
    derived |= {
        "itl_max_ms": nullable(_group_max(gap_val, gap_req, n_req)),
        "output_tokens": pa.array(output_tokens, type=pa.int32()),
        "output_tokens_source": pa.array(output_source, type=pa.string()),
        "token_events": pa.array(token_events.astype(np.int32)),
        "coalesced_events": pa.array(np.bincount(req[coalesced], minlength=n_req).astype(np.int32)),
    }
    yield
    derived |= {
        "max_events_per_read": nullable(_group_max(run_len, req[run_start], n_req), pa.int32()),
        "stamps": pa.array([None if t.connection is None else t.connection.stamps for t in timelines], pa.string()),
        "read_delay_p50_ms": nullable(delay_p50),
        "read_delay_p99_ms": nullable(delay_p99),
    }
    yield
    columns = []
    for f in REQUEST_SCHEMA:
        if f.name in derived:
            columns.append(derived[f.name])
        else:
            columns.append(pa.array(scalars[f.name], type=f.type))
            yield
    requests = pa.Table.from_arrays(columns, schema=REQUEST_SCHEMA)
    steps = np.array(scalars["step"], dtype=np.int32)
    ids = np.array(scalars["request_id"], dtype=np.int64)
    del scalars, columns, derived  # tens of thousands of objects: released in a step of their own
    yield

    event_columns = [
        pa.array(steps[req]),
        pa.array(ids[req]),
        pa.array((np.arange(n_ev, dtype=np.int64) - first[req]).astype(np.int32)),
        pa.array((at_ns - started[req]) / NS_PER_MS),
        pa.array(read_index),
        pa.DictionaryArray.from_arrays(pa.array(kind, type=pa.int8()), _KIND_DICTIONARY),
    ]
    yield
    event_columns += [
        pa.array(tokens),
        pa.array(text_chars),
        nullable(gap),
        pa.array(coalesced),
        nullable(delay),
        pa.array(choice),
        nullable(read_delay),
    ]
    events = pa.Table.from_arrays(event_columns, schema=EVENT_SCHEMA)
    return requests, events


def prime_conversions() -> None:
    """Run every conversion once on a throw-away timeline.

    The first numpy→Arrow conversion imports pandas inside pyarrow (~0.3 s), and numpy sets some functions up on
    first use: paid mid-run, either would stall the event loop and show up as a fake latency spike. Workers call
    this before their step starts.
    """
    t = Timeline(started_ns=1)
    t.reads = [Read(2, 10), Read(3, 10)]
    t.events = EventLog(
        [
            StreamEvent(2, 0, EventKind.CONTENT, 1, 1, 1),
            StreamEvent(3, 1, EventKind.CONTENT, 1, 1, None),
            StreamEvent(3, 1, EventKind.DONE, 0, 0, None),
        ]
    )
    t.first_token_ns, t.last_token_ns, t.ended_ns = 2, 3, 4
    ctx = RequestContext(step=0, request_id=0, worker=0, class_name="prime", warmup=True, step_start_ns=0)
    build_tables([(t, ctx), (Timeline(started_ns=1), ctx)])
