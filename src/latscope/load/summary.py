"""Aggregate a run's tables into per-step, per-class summaries: percentiles, throughput, goodput, errors, warnings.

Conventions (what each number means, so reports and notebooks agree):

* A request is a *logical* request: with ``--retries`` its attempts count once, so throughput, goodput and error
  rates are per logical request; ``attempts``, ``retried`` and the retry times say what the retries cost.
* Only *measured* requests count: warm-up requests are in ``requests.parquet`` (``warmup`` = true) and nowhere here.
* Latency metrics are over successful requests. ``itl_ms`` has one sample per inter-token gap of every successful
  request — not one mean per request — so a single stall shows in the tail instead of being averaged away.
* The *window* runs from the first measured request's scheduled (or start) time to the last measured request's end;
  throughput and goodput are per second of that window.
* Gaps of exactly 0 ms come from token events that arrived in one socket read (coalesced by buffering somewhere
  between the server and the client). They are kept in ``itl_ms`` and counted in ``zero_gaps``; a warning names the
  share when it is large enough to drag the percentiles down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from latscope.load.health import MACHINE_BUSY, SATURATED_CPU, ClientHealth
from latscope.load.slo import Slo
from latscope.load.stats import Dist, describe
from latscope.quietgc import GUARD_GROWTH_BYTES

#: Per-request latency columns summarised as distributions (ms), in display order.
LATENCY_COLUMNS = ("client_queue_ms", "retry_ms", "setup_ms", "ttfb_ms", "ttft_ms", "tpot_ms", "e2e_ms")

#: Share of zero inter-token gaps above which the report warns: 1 % of gaps at 0 ms already moves p1–p5, and on a
#: clean loopback stream it is 0.
ZERO_GAP_WARN_SHARE = 0.01

#: Open loop: achieved rate below this share of the schedule's rate means the client fell behind.
RATE_SHORTFALL = 0.99

#: Dispatch lateness p99 above this (ms) means arrivals were late: the pacing target of ``latscope bench``.
SCHEDULE_LAG_WARN_MS = 1.0


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """Aggregates over one group of measured requests (a whole step, or one workload class in it).

    Rates are per second of the step's window; ``metrics`` maps a name to its :class:`Dist`: the ``*_ms`` columns
    of :data:`LATENCY_COLUMNS`, ``itl_ms`` (every gap), ``output_tokens`` and ``prompt_tokens`` (tokens).
    """

    requests: int  #: measured requests (successful + failed)
    ok: int
    errors: int
    error_rate: float  #: errors / requests (0 when there were none)
    throughput_rps: float  #: successful requests per second
    output_tokens_per_s: float  #: output tokens of successful requests per second
    input_tokens_per_s: float | None  #: prompt tokens of successful requests per second (None when unknown)
    goodput_rps: float | None  #: requests meeting every SLO per second (None without an SLO)
    goodput_fraction: float | None  #: share of measured requests meeting every SLO
    metrics: dict[str, Dist] = field(default_factory=dict)
    token_gaps: int = 0  #: inter-token gaps measured
    zero_gaps: int = 0  #: gaps of exactly 0 ms (token events coalesced into one read)
    events: int = 0  #: stream events received
    coalesced_events: int = 0  #: events that arrived in the same read as the previous event of their request
    errors_by_phase: dict[str, int] = field(default_factory=dict)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    errors_by_status: dict[str, int] = field(default_factory=dict)  #: HTTP status (as text) → count
    attempts: int = 0  #: attempts sent for these logical requests (``requests`` without retries)
    retried: int = 0  #: logical requests sent more than once
    unkeyed_retries: int = 0  #: retries (attempts after a first) sent without an ``Idempotency-Key``
    #: keyed logical requests the server generated again: an earlier attempt had begun streaming one response (it
    #: named its id and delivered tokens) and the answer that ended it is another (:func:`executed_again`)
    executed_again: int = 0
    retry_time_ms: float = 0.0  #: time the logical requests spent in earlier attempts and the waits between, summed
    retry_wait_time_ms: float = 0.0  #: the waiting part of ``retry_time_ms`` (backoff, Retry-After), summed
    request_time_ms: float = 0.0  #: the logical requests' own time (first attempt's start → end), summed

    @property
    def zero_gap_share(self) -> float:
        """zero_gaps / token_gaps (0 without gaps)."""
        return self.zero_gaps / self.token_gaps if self.token_gaps else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "throughput_rps": self.throughput_rps,
            "output_tokens_per_s": self.output_tokens_per_s,
            "input_tokens_per_s": self.input_tokens_per_s,
            "goodput_rps": self.goodput_rps,
            "goodput_fraction": self.goodput_fraction,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "token_gaps": self.token_gaps,
            "zero_gaps": self.zero_gaps,
            "zero_gap_share": self.zero_gap_share,
            "events": self.events,
            "coalesced_events": self.coalesced_events,
            "errors_by_phase": self.errors_by_phase,
            "errors_by_kind": self.errors_by_kind,
            "errors_by_status": self.errors_by_status,
            "attempts": self.attempts,
            "retried": self.retried,
            "unkeyed_retries": self.unkeyed_retries,
            "executed_again": self.executed_again,
            "retry_time_ms": self.retry_time_ms,
            "retry_wait_time_ms": self.retry_wait_time_ms,
            "request_time_ms": self.request_time_ms,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GroupSummary:
        """Inverse of :meth:`to_dict`."""
        return cls(
            requests=int(data["requests"]),
            ok=int(data["ok"]),
            errors=int(data["errors"]),
            error_rate=float(data["error_rate"]),
            throughput_rps=float(data["throughput_rps"]),
            output_tokens_per_s=float(data["output_tokens_per_s"]),
            input_tokens_per_s=data.get("input_tokens_per_s"),
            goodput_rps=data.get("goodput_rps"),
            goodput_fraction=data.get("goodput_fraction"),
            metrics={k: Dist.from_dict(v) for k, v in (data.get("metrics") or {}).items()},
            token_gaps=int(data.get("token_gaps", 0)),
            zero_gaps=int(data.get("zero_gaps", 0)),
            events=int(data.get("events", 0)),
            coalesced_events=int(data.get("coalesced_events", 0)),
            errors_by_phase=dict(data.get("errors_by_phase") or {}),
            errors_by_kind=dict(data.get("errors_by_kind") or {}),
            errors_by_status=dict(data.get("errors_by_status") or {}),
            # absent in runs saved before retries: every request was one attempt
            attempts=int(data.get("attempts", data["requests"])),
            retried=int(data.get("retried", 0)),
            unkeyed_retries=int(data.get("unkeyed_retries", 0)),
            executed_again=int(data.get("executed_again", 0)),
            retry_time_ms=float(data.get("retry_time_ms", 0.0)),
            retry_wait_time_ms=float(data.get("retry_wait_time_ms", 0.0)),
            request_time_ms=float(data.get("request_time_ms", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class StepSummary:
    """Everything measured in one step (one point of a sweep, or the whole run without a sweep)."""

    step: int
    label: str  #: e.g. ``concurrency=8`` or ``rate=100/s poisson``
    arrival: dict[str, Any]  #: the arrival process, as configured
    window_s: float  #: measurement window (s)
    warmup_requests: int  #: requests excluded as warm-up
    overall: GroupSummary
    classes: dict[str, GroupSummary]
    offered_rps: float | None = None  #: open loop: the target rate
    schedule_rps: float | None = None  #: open loop: the rate of the drawn schedule (random draws differ from target)
    achieved_rps: float | None = None  #: open loop: the rate requests actually started at
    schedule_lag_ms: Dist | None = None  #: open loop: how late the dispatcher woke for each request (ms)
    client_delay_ms: Dist | None = None  #: client event stamp − server send stamp (lab ``--truth`` only), ms; every
    #: measured request's events, failed ones included
    connections_opened: int = 0  #: measured requests that opened a new connection
    connections_reused: int = 0  #: measured requests served on a reused connection
    slo: dict[str, float] | None = None  #: the SLO bounds (ms) goodput was computed against
    client: ClientHealth | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "step": self.step,
            "label": self.label,
            "arrival": self.arrival,
            "window_s": self.window_s,
            "warmup_requests": self.warmup_requests,
            "offered_rps": self.offered_rps,
            "schedule_rps": self.schedule_rps,
            "achieved_rps": self.achieved_rps,
            "schedule_lag_ms": None if self.schedule_lag_ms is None else self.schedule_lag_ms.to_dict(),
            "client_delay_ms": None if self.client_delay_ms is None else self.client_delay_ms.to_dict(),
            "connections_opened": self.connections_opened,
            "connections_reused": self.connections_reused,
            "slo": self.slo,
            "overall": self.overall.to_dict(),
            "classes": {k: v.to_dict() for k, v in self.classes.items()},
            "client": None if self.client is None else self.client.to_dict(),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepSummary:
        """Inverse of :meth:`to_dict`."""

        def dist(key: str) -> Dist | None:
            value = data.get(key)
            return None if value is None else Dist.from_dict(value)

        client = data.get("client")
        return cls(
            step=int(data["step"]),
            label=str(data["label"]),
            arrival=dict(data.get("arrival") or {}),
            window_s=float(data["window_s"]),
            warmup_requests=int(data.get("warmup_requests", 0)),
            overall=GroupSummary.from_dict(data["overall"]),
            classes={k: GroupSummary.from_dict(v) for k, v in (data.get("classes") or {}).items()},
            offered_rps=data.get("offered_rps"),
            schedule_rps=data.get("schedule_rps"),
            achieved_rps=data.get("achieved_rps"),
            schedule_lag_ms=dist("schedule_lag_ms"),
            client_delay_ms=dist("client_delay_ms"),
            connections_opened=int(data.get("connections_opened", 0)),
            connections_reused=int(data.get("connections_reused", 0)),
            slo=data.get("slo"),
            client=None if client is None else ClientHealth.from_dict(client),
            warnings=list(data.get("warnings") or []),
        )


# --- computing ------------------------------------------------------------------------------------------------------


def _floats(table: pa.Table, name: str) -> npt.NDArray[np.float64]:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _objects(table: pa.Table, name: str) -> npt.NDArray[Any]:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=object)


def _rate(times_ms: npt.NDArray[np.float64]) -> float | None:
    """(n − 1) / span: the rate of a sequence of start times (ms), None with fewer than two."""
    times = times_ms[~np.isnan(times_ms)]
    if times.size < 2:
        return None
    span_s = (float(times.max()) - float(times.min())) / 1000.0
    return (times.size - 1) / span_s if span_s > 0 else None


@dataclass(slots=True)
class EventSamples:
    """Event-derived samples of one (step, class) group, gathered batch by batch."""

    gaps: list[npt.NDArray[np.float64]] = field(default_factory=list)
    delays: list[npt.NDArray[np.float64]] = field(default_factory=list)
    events: int = 0
    coalesced: int = 0

    def concat_gaps(self) -> npt.NDArray[np.float64]:
        return np.concatenate(self.gaps) if self.gaps else np.empty(0)

    def concat_delays(self) -> npt.NDArray[np.float64]:
        return np.concatenate(self.delays) if self.delays else np.empty(0)


def accumulate_events(
    requests: pa.Table, event_batches: Iterable[pa.RecordBatch]
) -> dict[tuple[int, str], EventSamples]:
    """One pass over the events: per (step, class) the gaps, event counts and coalescing of measured successful
    requests, and the client delays of every measured request (a failed or cut-off stream's events were still
    stamped by this client: they describe it as well as any)."""
    steps = np.asarray(requests.column("step").to_numpy(), dtype=np.int64)
    ids = np.asarray(requests.column("request_id").to_numpy(), dtype=np.int64)
    classes = _objects(requests, "class")
    ok = np.asarray(requests.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    counted = ~np.asarray(requests.column("warmup").to_numpy(zero_copy_only=False), dtype=bool)
    class_names = sorted(set(classes.tolist()))
    class_code = {name: i for i, name in enumerate(class_names)}
    codes = np.array([class_code[c] for c in classes], dtype=np.int64)

    # Lookup tables per step, indexed by request_id: class code, or −1 for requests that do not count.
    luts: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]] = {}
    for step in np.unique(steps).tolist():
        in_step = steps == step
        size = int(ids[in_step].max()) + 1
        table: npt.NDArray[np.int64] = np.full(size, -1, dtype=np.int64)
        table[ids[in_step]] = np.where(counted[in_step], codes[in_step], -1)
        ok_table: npt.NDArray[np.bool_] = np.zeros(size, dtype=bool)
        ok_table[ids[in_step]] = ok[in_step]
        luts[int(step)] = (table, ok_table)

    acc: dict[tuple[int, str], EventSamples] = {}
    for batch in event_batches:
        b_steps = np.asarray(batch.column("step").to_numpy(), dtype=np.int64)
        b_ids = np.asarray(batch.column("request_id").to_numpy(), dtype=np.int64)
        gaps = np.asarray(batch.column("gap_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
        delays = np.asarray(batch.column("delay_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
        coalesced = np.asarray(batch.column("coalesced").to_numpy(zero_copy_only=False), dtype=bool)
        for step in np.unique(b_steps).tolist():
            tables = luts.get(int(step))
            if tables is None:
                continue
            lut, ok_lut = tables
            sel = b_steps == step
            rid = b_ids[sel]
            known = rid < lut.size
            code: npt.NDArray[np.int64] = np.full(rid.size, -1, dtype=np.int64)
            code[known] = lut[rid[known]]
            good: npt.NDArray[np.bool_] = np.zeros(rid.size, dtype=bool)
            good[known] = ok_lut[rid[known]]
            for c in np.unique(code[code >= 0]).tolist():
                mask = code == c
                ok_mask = mask & good
                group = acc.setdefault((int(step), class_names[c]), EventSamples())
                g = gaps[sel][ok_mask]
                d = delays[sel][mask]
                group.gaps.append(g[~np.isnan(g)])
                group.delays.append(d[~np.isnan(d)])
                group.events += int(ok_mask.sum())
                group.coalesced += int(coalesced[sel][ok_mask].sum())
    return acc


def _group(
    rows: pa.Table,
    events: list[EventSamples],
    window_s: float,
    slo: Slo | None,
) -> GroupSummary:
    ok = np.asarray(rows.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    n = int(ok.size)
    n_ok = int(ok.sum())
    metrics: dict[str, Dist] = {}
    for name in LATENCY_COLUMNS:
        d = describe(_floats(rows, name)[ok])
        if d is not None:
            metrics[name] = d
    gaps = np.concatenate([e.concat_gaps() for e in events]) if events else np.empty(0)
    itl = describe(gaps)
    if itl is not None:
        metrics["itl_ms"] = itl
    out_tokens = _floats(rows, "output_tokens")[ok]
    in_tokens = _floats(rows, "prompt_tokens")[ok]
    for name, values in (("output_tokens", out_tokens), ("prompt_tokens", in_tokens)):
        d = describe(values)
        if d is not None:
            metrics[name] = d
    per_s = 1.0 / window_s if window_s > 0 else 0.0
    known_in = in_tokens[~np.isnan(in_tokens)]

    goodput_rps: float | None = None
    goodput_fraction: float | None = None
    if slo is not None:
        columns = {name: _floats(rows, name) for name in rows.column_names if name.endswith("_ms")}
        good = int(slo.met(columns, ok).sum())
        goodput_rps = good * per_s
        goodput_fraction = good / n if n else 0.0

    attempts = _column_or(rows, "attempts", 1.0)
    retry = _column_or(rows, "retry_ms", 0.0)
    keyed = _keyed(rows)
    begin, end = _floats(rows, "started_at_ms"), _floats(rows, "ended_at_ms")
    lasted = end - begin

    failed = rows.filter(pa.array(~ok))
    phases = Counter(v for v in failed.column("error_phase").to_pylist() if v is not None)
    kinds = Counter(v for v in failed.column("error_kind").to_pylist() if v is not None)
    statuses = Counter(str(v) for v in failed.column("error_status").to_pylist() if v is not None)

    return GroupSummary(
        requests=n,
        ok=n_ok,
        errors=n - n_ok,
        error_rate=(n - n_ok) / n if n else 0.0,
        throughput_rps=n_ok * per_s,
        output_tokens_per_s=float(np.nansum(out_tokens)) * per_s,
        input_tokens_per_s=float(known_in.sum()) * per_s if known_in.size else None,
        goodput_rps=goodput_rps,
        goodput_fraction=goodput_fraction,
        metrics=metrics,
        token_gaps=int(gaps.size),
        zero_gaps=int((gaps == 0).sum()),
        events=sum(e.events for e in events),
        coalesced_events=sum(e.coalesced for e in events),
        errors_by_phase=dict(phases.most_common()),
        errors_by_kind=dict(kinds.most_common()),
        errors_by_status=dict(statuses.most_common()),
        attempts=int(attempts.sum()),
        retried=int((attempts > 1).sum()),
        unkeyed_retries=int((attempts - 1)[~keyed].sum()),
        executed_again=executed_again(rows.filter(pa.array(keyed & (attempts > 1)))),
        retry_time_ms=float(retry.sum()),
        retry_wait_time_ms=float(_column_or(rows, "retry_wait_ms", 0.0).sum()),
        request_time_ms=float(np.nansum(lasted)),
    )


def _column_or(rows: pa.Table, name: str, default: float) -> npt.NDArray[np.float64]:
    """A numeric column, or ``default`` everywhere for runs saved before it existed."""
    if name not in rows.column_names:
        return np.full(rows.num_rows, default)
    return np.nan_to_num(_floats(rows, name), nan=default)


def executed_again(rows: pa.Table) -> int:
    """Of ``rows`` (keyed logical requests that were retried), those the server generated a second time: an earlier
    attempt had begun streaming a response (it named the response's id and delivered tokens), and the attempt that
    ended the logical request streamed a response with another id. A server that honours the key replays the first
    response (the same id) or makes the retry wait for it; none of them is counted when a stream named no id."""
    if "response_id" not in rows.column_names or rows.num_rows == 0:
        return 0
    count = 0
    for final, earlier in zip(rows.column("response_id").to_pylist(), rows.column("retried").to_pylist(), strict=True):
        begun = {a["response_id"] for a in earlier if a.get("response_id") is not None and (a.get("tokens") or 0) > 0}
        if final is not None and begun and final not in begun:
            count += 1
    return count


def _keyed(rows: pa.Table) -> npt.NDArray[np.bool_]:
    """Per row: an ``Idempotency-Key`` went with its attempts."""
    if "idempotency_key" not in rows.column_names:
        return np.zeros(rows.num_rows, dtype=bool)
    return np.asarray(rows.column("idempotency_key").is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _window_s(rows: pa.Table) -> float:
    """From the first measured request's scheduled (else started) time to the last one's end, in s."""
    if rows.num_rows == 0:
        return 0.0
    scheduled = _floats(rows, "scheduled_at_ms")
    started = _floats(rows, "started_at_ms")
    begin = np.where(np.isnan(scheduled), started, scheduled)
    ended = _floats(rows, "ended_at_ms")
    end = np.where(np.isnan(ended), started, ended)
    return max(0.0, (float(np.nanmax(end)) - float(np.nanmin(begin))) / 1000.0)


def summarize_step(
    step: int,
    label: str,
    arrival: dict[str, Any],
    requests: pa.Table,
    events: Mapping[tuple[int, str], EventSamples],
    *,
    slo: Slo | None = None,
    client: ClientHealth | None = None,
) -> StepSummary:
    """Summarise one step from its rows of ``requests`` (all of them, warm-up included) and the accumulated events."""
    warm = np.asarray(requests.column("warmup").to_numpy(zero_copy_only=False), dtype=bool)
    rows = requests.filter(pa.array(~warm))
    window_s = _window_s(rows)
    classes_in = sorted(set(rows.column("class").to_pylist()))
    step_events = [e for (s, _), e in events.items() if s == step]
    overall = _group(rows, step_events, window_s, slo)
    classes = {}
    if len(classes_in) > 1:
        for name in classes_in:
            sub = rows.filter(pc.equal(rows.column("class"), name))
            ev = events.get((step, name))
            classes[name] = _group(sub, [ev] if ev else [], window_s, slo)

    offered = arrival.get("rate_rps") if arrival.get("kind") == "open" else None
    schedule_rps = achieved = None
    lag: Dist | None = None
    if offered is not None:
        schedule_rps = _rate(_floats(rows, "scheduled_at_ms"))
        achieved = _rate(_floats(rows, "started_at_ms"))
        lag = describe(_floats(rows, "schedule_lag_ms"))
    delays = np.concatenate([e.concat_delays() for e in step_events]) if step_events else np.empty(0)
    reused = rows.column("reused").to_pylist()

    summary = StepSummary(
        step=step,
        label=label,
        arrival=arrival,
        window_s=window_s,
        warmup_requests=int(warm.sum()),
        overall=overall,
        classes=classes,
        offered_rps=offered,
        schedule_rps=schedule_rps,
        achieved_rps=achieved,
        schedule_lag_ms=lag,
        client_delay_ms=describe(delays),
        connections_opened=sum(1 for v in reused if v is False),
        connections_reused=sum(1 for v in reused if v is True),
        slo=None if slo is None else slo.to_dict(),
        client=client,
    )
    summary.warnings.extend(step_warnings(summary))
    return summary


def summarize_run(
    requests: pa.Table,
    event_batches: Iterable[pa.RecordBatch],
    steps: list[tuple[int, str, dict[str, Any]]],
    *,
    slo: Slo | None = None,
    clients: Mapping[int, ClientHealth] | None = None,
) -> list[StepSummary]:
    """Summaries of every step of a run. ``steps`` lists ``(step, label, arrival dict)``; ``clients`` maps a step to
    its merged client health. Events are read in one streaming pass."""
    acc = accumulate_events(requests, event_batches) if requests.num_rows else {}
    out: list[StepSummary] = []
    step_col = np.asarray(requests.column("step").to_numpy(), dtype=np.int64)
    for step, label, arrival in steps:
        rows = requests.filter(pa.array(step_col == step))
        out.append(summarize_step(step, label, arrival, rows, acc, slo=slo, client=(clients or {}).get(step)))
    return out


def step_warnings(s: StepSummary) -> list[str]:
    """What a reader must know before trusting the step's numbers."""
    out: list[str] = []
    o = s.overall
    if o.requests == 0:
        out.append("no measured requests: the bounds ended the step during warm-up")
    if o.errors:
        top = ", ".join(f"{phase} {count}" for phase, count in o.errors_by_phase.items())
        out.append(f"{o.errors} of {o.requests} requests failed ({o.error_rate:.1%}); by phase: {top}")
    if o.token_gaps and o.zero_gap_share >= ZERO_GAP_WARN_SHARE:
        out.append(
            f"{o.zero_gaps} of {o.token_gaps} inter-token gaps ({o.zero_gap_share:.1%}) are 0 ms: token events "
            "arrived coalesced in one read (buffering between server and client); ITL percentiles include them as 0"
        )
    c = s.client
    if c is not None and c.saturated_workers:
        out.append(
            f"the client was saturated: {c.saturated_workers} of {c.workers} worker event loop(s) above "
            f"{SATURATED_CPU:.0%} of a core (up to {c.loop_cpu_max or 0:.0%}); its stamps and dispatches are late, "
            "so latencies include client delay: add --workers or lower the load"
        )
    elif c is not None and c.saturated and c.loop_lag_ms is not None:
        out.append(_lag_warning(c, c.loop_lag_ms.p99))
    if c is not None and c.gc_pauses:
        out.append(
            f"the client's memory grew by over {GUARD_GROWTH_BYTES >> 20:,} MiB, so it collected garbage "
            f"{c.gc_pauses} time(s) mid-step (pauses up to {c.gc_pause_max_ms or 0:.0f} ms, reads stamped late "
            "meanwhile): something keeps reference cycles alive (a library, or very many requests in flight)"
        )
    if s.schedule_rps and s.achieved_rps and s.achieved_rps < RATE_SHORTFALL * s.schedule_rps:
        out.append(
            f"arrivals fell behind: achieved {s.achieved_rps:.1f}/s of a scheduled {s.schedule_rps:.1f}/s "
            "(late requests are counted in client_queue_ms)"
        )
    if s.schedule_lag_ms is not None and s.schedule_lag_ms.p99 > SCHEDULE_LAG_WARN_MS:
        out.append(f"dispatch lag p99 {s.schedule_lag_ms.p99:.2f} ms exceeds {SCHEDULE_LAG_WARN_MS:g} ms")
    queue = o.metrics.get("client_queue_ms")
    cap = s.arrival.get("max_concurrency")
    if cap and queue is not None and queue.p99 > SCHEDULE_LAG_WARN_MS:
        out.append(
            f"max concurrency {cap} was reached: requests waited in the client up to {queue.max:.1f} ms "
            f"(p99 {queue.p99:.1f} ms, counted in client_queue_ms)"
        )
    return out


def _lag_warning(c: ClientHealth, lag_p99_ms: float) -> str:
    """Why the client's loop lagged, from what it and the machine did in the lagging samples."""
    head = f"the client's event loop lagged (timer lateness p99 {lag_p99_ms:.1f} ms)"
    cpu = c.lagging_cpu_mean if c.lagging_cpu_mean is not None else c.loop_cpu_mean
    busy = c.lagging_machine_busy_mean if c.lagging_machine_busy_mean is not None else c.machine_busy_mean
    if cpu is not None and cpu >= SATURATED_CPU:
        return (
            f"{head} while its loop used {cpu:.0%} of a core: it was saturated at those times, so stamps and "
            "dispatches there are late: add --workers or lower the load"
        )
    if busy is not None and busy >= MACHINE_BUSY:
        return (
            f"{head} while using only {cpu or 0:.0%} of a core: other processes competed for the CPU "
            f"(machine {busy:.0%} busy); stamps may be late by as much"
        )
    machine = "" if busy is None else f", machine {busy:.0%} busy"
    return (
        f"{head} while neither it ({cpu or 0:.0%} of a core) nor the machine was busy{machine}: something blocked "
        "it (swapping, a stalled disk, a paused virtual machine); stamps may be late by as much"
    )
