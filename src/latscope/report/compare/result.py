"""Before/after comparisons as data: two bench runs step by step (:func:`compare_runs`), or two diagnoses finding by
finding (:func:`compare_diagnoses`). Pure: the runs come in as :class:`~latscope.report.compare.samples.RunSamples`,
the diagnoses as their ``latscope.diagnosis/1`` dicts. JSON schema ``latscope.compare/1`` (:meth:`to_dict`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latscope.report.compare.samples import CLIENT_PHASES, RunSamples, StepSamples
from latscope.report.compare.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Attribution,
    Difference,
    attribute,
    percentile_difference,
    proportion_difference,
)
from latscope.report.format import DELTA, DELTA_BARE, SIZE, fmt_ms

SCHEMA = "latscope.compare/1"

#: Latency metrics compared, with their labels (ms).
LATENCY_METRICS: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "TTFT"),
    ("itl_ms", "ITL"),
    ("tpot_ms", "TPOT"),
    ("e2e_ms", "E2E"),
)
#: Rates compared (0…1).
RATE_METRICS: tuple[tuple[str, str], ...] = (("goodput", "goodput"), ("error_rate", "error rate"))
#: The percentiles compared, 0…1.
QUANTILES = (0.5, 0.95, 0.99)
#: A latency change smaller than this share of A's value is not called significant whatever its interval: the
#: interval covers the sampling noise within each run, not how much two runs of one server on one machine differ
#: (twice the largest TTFT p50 move between repeated runs of tests/report/test_compare_lab.py's workload on a shared
#: host). ``--min-change`` lowers it on a quiet host.
DEFAULT_MIN_CHANGE_SHARE = 0.10
#: Metrics whose change is split into phases: the ones a request's phases add up to.
ATTRIBUTED = ("ttft_ms", "e2e_ms")
LABELS = dict(LATENCY_METRICS + RATE_METRICS)


def q_label(q: float | None) -> str:
    """``0.95`` → ``"p95"``; None (a rate) → ``""``."""
    return "" if q is None else f"p{q * 100:g}"


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric at one percentile (``q`` None for a rate) in A and B."""

    metric: str  #: ``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms``, ``goodput``, ``error_rate``
    q: float | None
    diff: Difference

    @property
    def label(self) -> str:
        """``"TTFT p95"``, ``"error rate"``."""
        return f"{LABELS[self.metric]} {q_label(self.q)}".strip()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"metric": self.metric, "q": self.q, **self.diff.to_dict()}


@dataclass(frozen=True, slots=True)
class StepComparison:
    """One step of two runs compared."""

    step: int
    label_a: str
    label_b: str
    changes: list[MetricChange]
    #: (metric, q) → the split of that percentile's change over the phases
    attributions: dict[tuple[str, float], Attribution] = field(default_factory=dict)

    def change(self, metric: str, q: float | None) -> MetricChange | None:
        """The change of ``metric`` at ``q``, or None when it could not be computed."""
        return next((c for c in self.changes if c.metric == metric and c.q == q), None)

    def clause(self, change: MetricChange) -> str:
        """``"TTFT p95 −312 ms [−340, −290], significant; 290 ms of it server queue"``."""
        d = change.diff
        text = (
            f"{change.label} {fmt_ms(d.delta, DELTA)} [{fmt_ms(d.low, DELTA_BARE)}, "
            f"{fmt_ms(d.high, DELTA_BARE)}], {'significant' if d.significant else 'not significant'}"
        )
        attribution = self.attributions.get((change.metric, change.q or 0.0))
        largest = attribution.largest() if attribution is not None and d.significant else None
        if largest is not None:
            text += f"; {fmt_ms(largest[1], SIZE)} of it {largest[0]}"
        return text

    def verdict(self) -> str:
        """One line: TTFT p95's change and the phase it lives in, then the largest other significant latency change
        (relative to A), or that no other changed."""
        headline = self.change("ttft_ms", 0.95) or self.change("ttft_ms", 0.5)
        if headline is None:
            return "nothing to compare: no successful request in one of the runs"
        others = [c for c in self.changes if c.q is not None and c is not headline and c.diff.significant]
        others = [c for c in others if c.diff.a > 0 and c.metric != headline.metric]
        text = self.clause(headline)
        if others:
            other = max(others, key=lambda c: abs(c.diff.delta) / c.diff.a)
            text += " · " + self.clause(other)
        elif not headline.diff.significant:
            text += " · no latency percentile changed significantly"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        attributions: dict[str, dict[str, Any]] = {}
        for (metric, q), att in self.attributions.items():
            attributions.setdefault(metric, {})[q_label(q)] = att.to_dict()
        return {
            "step": self.step,
            "label_a": self.label_a,
            "label_b": self.label_b,
            "verdict": self.verdict(),
            "changes": [c.to_dict() for c in self.changes],
            "attribution": attributions,
        }


@dataclass(frozen=True, slots=True)
class RunComparison:
    """Two bench runs compared, step by step (steps paired by index)."""

    a: str  #: run A's directory (before)
    b: str  #: run B's directory (after)
    steps: list[StepComparison]
    workload_differences: list[str]  #: what differs between the workloads (empty unless forced)
    forced: bool
    confidence: float
    resamples: int
    slo: dict[str, float] | None  #: the objectives goodput was counted against
    min_change_share: float = DEFAULT_MIN_CHANGE_SHARE  #: see :data:`DEFAULT_MIN_CHANGE_SHARE`

    def to_dict(self) -> dict[str, Any]:
        """The ``latscope.compare/1`` JSON object."""
        return {
            "schema": SCHEMA,
            "kind": "bench",
            "a": self.a,
            "b": self.b,
            "forced": self.forced,
            "workload_differences": self.workload_differences,
            "confidence": self.confidence,
            "resamples": self.resamples,
            "min_change_share": self.min_change_share,
            "slo": self.slo,
            "steps": [s.to_dict() for s in self.steps],
        }


def compare_steps(
    a: StepSamples,
    b: StepSamples,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    min_change_share: float = DEFAULT_MIN_CHANGE_SHARE,
) -> StepComparison:
    """Every metric of :data:`LATENCY_METRICS` at every :data:`QUANTILES`, the rates, and the phase split of TTFT
    and E2E. Each difference draws from its own seed derived from ``seed``, so the result does not depend on order."""
    changes: list[MetricChange] = []
    attributions: dict[tuple[str, float], Attribution] = {}
    for m_index, (metric, _) in enumerate(LATENCY_METRICS):
        for q_index, q in enumerate(QUANTILES):
            sub_seed = seed * 1000 + m_index * 10 + q_index
            diff = percentile_difference(
                a.metric(metric),
                b.metric(metric),
                q,
                seed=sub_seed,
                resamples=resamples,
                confidence=confidence,
                min_change_share=min_change_share,
            )
            if diff is not None:
                changes.append(MetricChange(metric, q, diff))
    rates: list[tuple[str, tuple[int, int], tuple[int, int]]] = [
        ("error_rate", (a.errors, a.requests), (b.errors, b.requests))
    ]
    if a.good is not None and b.good is not None:
        rates.insert(0, ("goodput", (a.good, a.requests), (b.good, b.requests)))
    for r_index, (metric, (hits_a, n_a), (hits_b, n_b)) in enumerate(rates):
        rate = proportion_difference(
            hits_a, n_a, hits_b, n_b, seed=seed * 1000 + 900 + r_index, resamples=resamples, confidence=confidence
        )
        if rate is not None:
            changes.append(MetricChange(metric, None, rate))
    for metric in ATTRIBUTED:
        names = [n for n in dict.fromkeys([*a.phases, *b.phases]) if metric == "e2e_ms" or n != "stream"]
        ordered = [n for n in CLIENT_PHASES if n in names] + [n for n in names if n not in CLIENT_PHASES]
        for q in QUANTILES:
            att = attribute(a.metric(metric), a.phases, b.metric(metric), b.phases, q, order=ordered)
            if att is not None:
                attributions[(metric, q)] = att
    return StepComparison(a.step, a.label, b.label, changes, attributions)


def compare_runs(
    a: RunSamples,
    b: RunSamples,
    *,
    workload_differences: list[str] | None = None,
    forced: bool = False,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    min_change_share: float = DEFAULT_MIN_CHANGE_SHARE,
) -> RunComparison:
    """Compare the steps the two runs have in common (by index)."""
    steps = [
        compare_steps(
            sa, sb, seed=seed + index, resamples=resamples, confidence=confidence, min_change_share=min_change_share
        )
        for index, (sa, sb) in enumerate(zip(a.steps, b.steps, strict=False))
    ]
    return RunComparison(
        a.path,
        b.path,
        steps,
        workload_differences or [],
        forced,
        confidence,
        resamples,
        a.slo or b.slo,
        min_change_share,
    )


#: Outcome lists of a diagnosis, by how bad they are for the target.
OUTCOME_LISTS = ("findings", "inconclusive", "not_tested", "clear")
#: A cost that moved by less than this share (and less than :data:`COST_SAME_MS`) is reported unchanged: costs of
#: two diagnoses of the same server differ by their measurement noise.
COST_SAME_SHARE = 0.10
COST_SAME_MS = 1.0


@dataclass(frozen=True, slots=True)
class FindingChange:
    """One check in two diagnoses: what it concluded in each (``findings``, ``inconclusive``, ``not_tested``,
    ``clear`` or None when it did not run) and the finding's cost (ms) where it was one."""

    id: str
    title: str
    outcome_a: str | None
    outcome_b: str | None
    cost_a_ms: float | None
    cost_b_ms: float | None

    @property
    def change(self) -> str:
        """``appeared``, ``disappeared``, ``cost changed`` or ``unchanged``."""
        found_a, found_b = self.outcome_a == "findings", self.outcome_b == "findings"
        if found_b and not found_a:
            return "appeared"
        if found_a and not found_b:
            return "disappeared"
        if found_a and found_b and self.cost_a_ms is not None and self.cost_b_ms is not None:
            delta = abs(self.cost_b_ms - self.cost_a_ms)
            if delta > COST_SAME_MS and delta > COST_SAME_SHARE * max(abs(self.cost_a_ms), 1e-9):
                return "cost changed"
        return "unchanged"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.id,
            "title": self.title,
            "change": self.change,
            "outcome_a": self.outcome_a,
            "outcome_b": self.outcome_b,
            "cost_a_ms": self.cost_a_ms,
            "cost_b_ms": self.cost_b_ms,
        }


@dataclass(frozen=True, slots=True)
class DiagnosisComparison:
    """Two diagnoses compared: every check's outcome and cost, and the typical request's phases."""

    a: str
    b: str
    findings: list[FindingChange]
    phases: list[tuple[str, float | None, float | None]]  #: (phase or metric, A ms, B ms) of the typical request
    workload_differences: list[str]
    forced: bool

    def verdict(self) -> str:
        """One line: what appeared and disappeared, with the cost it carried."""
        gone = [f for f in self.findings if f.change == "disappeared"]
        new = [f for f in self.findings if f.change == "appeared"]
        moved = [f for f in self.findings if f.change == "cost changed"]
        parts = []
        if gone:
            saved = sum(f.cost_a_ms or 0.0 for f in gone)
            ids = ", ".join(f.id for f in gone)
            parts.append(f"{len(gone)} finding(s) gone ({ids}; {fmt_ms(saved, SIZE)} of cost)")
        if new:
            cost = sum(f.cost_b_ms or 0.0 for f in new)
            parts.append(f"{len(new)} new ({', '.join(f.id for f in new)}; {fmt_ms(cost, SIZE)})")
        if moved:
            parts.append(
                ", ".join(f"{f.id} {fmt_ms((f.cost_b_ms or 0.0) - (f.cost_a_ms or 0.0), DELTA)}" for f in moved)
            )
        ttft = next((p for p in self.phases if p[0] == "ttft"), None)
        if ttft is not None and ttft[1] is not None and ttft[2] is not None:
            parts.append(f"typical TTFT {fmt_ms(ttft[2] - ttft[1], DELTA)} (one request each, no interval)")
        return "; ".join(parts) if parts else "the same findings at the same cost"

    def to_dict(self) -> dict[str, Any]:
        """The ``latscope.compare/1`` JSON object."""
        return {
            "schema": SCHEMA,
            "kind": "diagnosis",
            "a": self.a,
            "b": self.b,
            "forced": self.forced,
            "workload_differences": self.workload_differences,
            "verdict": self.verdict(),
            "findings": [f.to_dict() for f in self.findings],
            "typical_request_ms": [{"phase": p, "a": va, "b": vb} for p, va, vb in self.phases],
        }


def _outcomes(data: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for name in OUTCOME_LISTS:
        for item in data.get(name) or []:
            out.setdefault(str(item.get("id")), (name, item))
    return out


def _typical(data: dict[str, Any]) -> dict[str, float]:
    summary = data.get("timeline_summary") or {}
    out = {k: float(v) for k, v in (summary.get("phases_ms") or {}).items() if isinstance(v, int | float)}
    for key in ("ttft_ms", "e2e_ms", "tpot_ms"):
        value = summary.get(key)
        if isinstance(value, int | float):
            out[key.removesuffix("_ms")] = float(value)
    return out


def compare_diagnoses(
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    path_a: str = "A",
    path_b: str = "B",
    workload_differences: list[str] | None = None,
    forced: bool = False,
) -> DiagnosisComparison:
    """Every check either diagnosis concluded on, findings first (by the larger of the two costs)."""
    oa, ob = _outcomes(a), _outcomes(b)
    changes: list[FindingChange] = []
    for check in dict.fromkeys([*oa, *ob]):
        la, ia = oa.get(check, (None, {}))
        lb, ib = ob.get(check, (None, {}))
        title = str(ib.get("title") or ia.get("title") or check)
        ca = float(ia["cost_ms"]) if la == "findings" and "cost_ms" in ia else None
        cb = float(ib["cost_ms"]) if lb == "findings" and "cost_ms" in ib else None
        changes.append(FindingChange(check, title, la, lb, ca, cb))
    changes.sort(key=lambda f: (-(max(f.cost_a_ms or 0.0, f.cost_b_ms or 0.0)), f.id))
    ta, tb = _typical(a), _typical(b)
    phases = [(name, ta.get(name), tb.get(name)) for name in dict.fromkeys([*ta, *tb])]
    return DiagnosisComparison(path_a, path_b, changes, phases, workload_differences or [], forced)
