"""A bench run directory read into what a comparison needs: per step, the measured requests' latencies, every
inter-token gap, the error and SLO counts, and each request's phases (ms).

Only measured requests count (warm-up excluded, as in :mod:`latscope.load.summary`); latencies and phases are over
successful requests, rates over all measured ones.

Phases of one request, in request order (ms; NaN = the phase did not happen):

* ``pool``, ``dns``, ``connect``, ``tls``, ``send`` — the client's marks;
* where the server reported its phases before the first token (``server parse``, ``server validate``,
  ``server queue``, ``server prefill`` …): those, taken out of the client's wait (request sent → first byte), what
  they leave of it as ``network + unreported`` (the round trip, time the server did not report), and ``first
  token`` (first byte → first token, less any server time that did not fit in the wait: a server that sends its
  headers before its prefill);
* otherwise ``wait`` and ``first token``;
* ``stream`` (first token → end; E2E only).

The phases of TTFT (all but ``stream``) and of E2E add up to the request's TTFT and E2E with the small client-side
gaps between marks (connection ready → send start) as the remainder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from latscope.load.slo import SLO_COLUMNS, Slo
from latscope.runs.storage import iter_event_batches, read_requests, read_run_json
from latscope.timeline.model import PHASES_BEFORE_FIRST_TOKEN, ServerPhase

FloatArray = npt.NDArray[np.float64]

#: The client's own phases before the server's part, in request order.
CLIENT_PHASES = ("pool", "dns", "connect", "tls", "send")
#: Server phases that split the client's wait; ``window_wait`` is left out because servers count it in ``queue``.
SERVER_PHASES: tuple[ServerPhase, ...] = tuple(p for p in PHASES_BEFORE_FIRST_TOKEN if p is not ServerPhase.WINDOW_WAIT)
#: The name of the wait the server's reported phases do not cover.
UNREPORTED = "network + unreported wait"


@dataclass(frozen=True, slots=True)
class StepSamples:
    """One step of a run, as samples. Latency arrays are ms over successful measured requests (NaN where a request
    lacks the metric, e.g. TPOT of a one-token answer); ``itl_ms`` holds every inter-token gap of those requests."""

    step: int
    label: str
    arrival: dict[str, Any]  #: the step's arrival process (``{"kind": "closed", "concurrency": 4}`` …)
    requests: int  #: measured requests (successful + failed)
    errors: int  #: measured requests that failed
    good: int | None  #: measured requests that met the run's SLO; None when the run has none
    ttft_ms: FloatArray
    tpot_ms: FloatArray
    e2e_ms: FloatArray
    itl_ms: FloatArray
    #: per-request phase durations (ms), aligned with ``ttft_ms`` / ``e2e_ms``; see the module docstring
    phases: dict[str, FloatArray] = field(default_factory=dict)

    def metric(self, name: str) -> FloatArray:
        """The samples of ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` or ``itl_ms``."""
        values: FloatArray = getattr(self, name)
        return values


@dataclass(frozen=True, slots=True)
class RunSamples:
    """A run directory's ``run.json`` and its steps as samples."""

    path: str
    data: dict[str, Any]  #: run.json
    steps: list[StepSamples]
    slo: dict[str, float] | None  #: the objectives ``good`` was counted against


def _col(table: pa.Table, name: str) -> FloatArray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def request_phases(table: pa.Table, server_reported: bool) -> dict[str, FloatArray]:
    """Per-request phases (ms) of the rows of ``table`` (see the module docstring). ``server_reported`` chooses
    the split of the wait: by the server's phases, or into ``wait`` and ``first token``."""
    phases = {name: _col(table, f"{name}_ms") for name in CLIENT_PHASES}
    ttfb, ttft, e2e = _col(table, "ttfb_ms"), _col(table, "ttft_ms"), _col(table, "e2e_ms")
    wait = _col(table, "wait_ms")
    first_token = ttft - ttfb
    if server_reported:
        reported = {f"server {p}": _col(table, f"server_{p}_ms") for p in SERVER_PHASES}
        covered = np.zeros(table.num_rows)
        for values in reported.values():
            covered += np.nan_to_num(values)
        phases.update(reported)
        # the server's phases come out of the wait first, and what does not fit there out of the first token (a
        # server that sends its headers before the prefill)
        in_wait = np.minimum(covered, np.nan_to_num(wait))
        phases[UNREPORTED] = wait - in_wait
        phases["first token"] = first_token - (covered - in_wait)
    else:
        phases["wait"] = wait
        phases["first token"] = first_token
    phases["stream"] = e2e - ttft
    return phases


def reports_server_phases(table: pa.Table) -> bool:
    """True when some row has a server-reported phase before the first token."""
    return any(np.any(~np.isnan(_col(table, f"server_{p}_ms"))) for p in SERVER_PHASES)


def _gaps(run_dir: Path, keys: set[tuple[int, int]]) -> dict[int, FloatArray]:
    """Every inter-token gap (ms) of the requests ``keys`` (``(step, request_id)``), by step."""
    parts: dict[int, list[FloatArray]] = {}
    by_step: dict[int, list[int]] = {}
    for step, request_id in keys:
        by_step.setdefault(step, []).append(request_id)
    wanted = {step: np.asarray(ids, dtype=np.int64) for step, ids in by_step.items()}
    for batch in iter_event_batches(run_dir, ["step", "request_id", "gap_ms"]):
        steps = np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        ids = np.asarray(batch.column(1).to_numpy(zero_copy_only=False), dtype=np.int64)
        gaps = np.asarray(batch.column(2).to_numpy(zero_copy_only=False), dtype=np.float64)
        has_gap = ~np.isnan(gaps)
        for step in np.unique(steps[has_gap]):
            pick = has_gap & (steps == step) & np.isin(ids, wanted.get(int(step), np.empty(0, np.int64)))
            parts.setdefault(int(step), []).append(gaps[pick])
    return {step: np.concatenate(chunks) for step, chunks in parts.items()}


def read_samples(run_dir: Path, slo: Slo | None = None, *, server_reported: bool | None = None) -> RunSamples:
    """Read the run in ``run_dir`` (raises :class:`~latscope.runs.storage.RunFormatError`). Goodput counts
    requests meeting ``slo``, else the run's own SLO, else none. ``server_reported`` forces the split of the wait
    (a comparison uses one split for both runs); by default it follows what this run's server reported."""
    data = read_run_json(run_dir)
    if slo is None and data.get("config", {}).get("slo"):
        slo = Slo.from_dict(data["config"]["slo"])
    table = read_requests(run_dir)
    warm = np.asarray(table.column("warmup").to_numpy(zero_copy_only=False), dtype=bool)
    measured = table.filter(pa.array(~warm))
    ok = np.asarray(measured.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    step_col = np.asarray(measured.column("step").to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = np.asarray(measured.column("request_id").to_numpy(zero_copy_only=False), dtype=np.int64)
    split_by_server = reports_server_phases(measured) if server_reported is None else server_reported
    gaps = _gaps(run_dir, {(int(s), int(i)) for s, i, good in zip(step_col, ids, ok, strict=True) if good})
    good_mask = None
    if slo is not None:
        columns = {col: _col(measured, col) for col in set(SLO_COLUMNS.values())}
        good_mask = slo.met(columns, ok)
    steps: list[StepSamples] = []
    for entry in data.get("steps", []):
        step = int(entry["step"])
        in_step = step_col == step
        rows = measured.filter(pa.array(in_step & ok))
        steps.append(
            StepSamples(
                step=step,
                label=str(entry.get("label", step)),
                arrival=dict(entry.get("summary", {}).get("arrival") or {}),
                requests=int(in_step.sum()),
                errors=int((in_step & ~ok).sum()),
                good=None if good_mask is None else int((in_step & good_mask).sum()),
                ttft_ms=_col(rows, "ttft_ms"),
                tpot_ms=_col(rows, "tpot_ms"),
                e2e_ms=_col(rows, "e2e_ms"),
                itl_ms=gaps.get(step, np.empty(0)),
                phases=request_phases(rows, split_by_server),
            )
        )
    return RunSamples(str(run_dir), data, steps, None if slo is None else slo.to_dict())


def reports_server_phases_dir(run_dir: Path) -> bool:
    """:func:`reports_server_phases` of the measured requests of the run in ``run_dir``."""
    return reports_server_phases(read_requests(run_dir))
