"""A comparison drawn in the terminal (rich): per step the verdict, a table of every metric's change with its
interval, and where TTFT's and E2E's changes live; for diagnoses, each check's outcome and cost in both."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from latscope.report.compare.result import (
    ATTRIBUTED,
    LABELS,
    QUANTILES,
    DiagnosisComparison,
    RunComparison,
    StepComparison,
    q_label,
)
from latscope.report.format import DELTA_BARE, TABLE, fmt_ms


def _value(metric: str, value: float) -> str:
    return f"{value:.1%}" if metric in ("goodput", "error_rate") else fmt_ms(value, TABLE)


def _delta(metric: str, value: float) -> str:
    if metric in ("goodput", "error_rate"):
        return f"{'−' if value < 0 else '+'}{abs(value) * 100:.1f} pt"
    return fmt_ms(value, DELTA_BARE)


#: Phases whose share of every percentile's change is under this (ms) are left out of the table (the JSON keeps them).
SHOWN_PHASE_MS = 0.005


def changes_table(step: StepComparison) -> Table:
    """metric | A | B | change | interval | significant."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("metric")
    for col in ("A", "B", "change", "interval", ""):
        table.add_column(col, justify="right")
    for change in step.changes:
        d = change.diff
        style = (
            ("red" if d.delta > 0 else "green") if change.metric != "goodput" else ("green" if d.delta > 0 else "red")
        )
        mark = Text("significant", style=f"bold {style}") if d.significant else Text("–", style="dim")
        table.add_row(
            change.label,
            _value(change.metric, d.a),
            _value(change.metric, d.b),
            Text(_delta(change.metric, d.delta), style=style if d.significant else ""),
            f"[{_delta(change.metric, d.low)}, {_delta(change.metric, d.high)}]",
            mark,
        )
    return table


def attribution_table(step: StepComparison) -> Table | None:
    """One row per phase, one column per attributed metric and percentile: the phase's share of the change (ms)."""
    keys = [(m, q) for m in ATTRIBUTED for q in QUANTILES if (m, q) in step.attributions]
    if not keys:
        return None
    table = Table(
        title="where the change lives (ms; requests around each percentile)",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        box=None,
        header_style="bold",
    )
    table.add_column("phase")
    for metric, q in keys:
        table.add_column(f"{LABELS[metric]} {q_label(q)}", justify="right")
    phases = [
        name
        for name in dict.fromkeys(name for key in keys for name, _ in step.attributions[key].phases)
        if any(abs(dict(step.attributions[k].phases).get(name, 0.0)) >= SHOWN_PHASE_MS for k in keys)
    ]
    for name in phases:
        cells: list[Text] = []
        for key in keys:
            att = step.attributions[key]
            ms = dict(att.phases).get(name)
            if ms is None:
                cells.append(Text("", style="dim"))
                continue
            big = abs(ms) >= 0.2 * abs(att.total_ms) and abs(ms) >= 0.5
            cells.append(Text(fmt_ms(ms, DELTA_BARE), style="bold" if big else "dim"))
        table.add_row(name, *cells)
    table.add_row(Text("total", style="bold"), *(Text(fmt_ms(step.attributions[k].total_ms, DELTA_BARE)) for k in keys))
    return table


def run_comparison_renderable(result: RunComparison) -> RenderableType:
    """The whole comparison of two bench runs."""
    parts: list[RenderableType] = []
    head = Text()
    head.append("A ", style="bold")
    head.append(result.a)
    head.append("   B ", style="bold")
    head.append(result.b)
    head.append(f"   {result.confidence:.0%} bootstrap intervals of B − A, {result.resamples:,} draws", style="dim")
    parts.append(head)
    if result.forced and result.workload_differences:
        parts.append(Text("compared despite: " + "; ".join(result.workload_differences), style="yellow"))
    for step in result.steps:
        label = step.label_a if step.label_a == step.label_b else f"{step.label_a} vs {step.label_b}"
        body: list[RenderableType] = [Text(step.verdict(), style="bold"), Text(""), changes_table(step)]
        att = attribution_table(step)
        if att is not None:
            body += [Text(""), att]
        parts.append(Panel(Group(*body), title=f"[bold]step {step.step}: {label}", title_align="left"))
    if not result.steps:
        parts.append(Text("the runs have no step in common", style="yellow"))
    return Group(*parts)


def diagnosis_comparison_renderable(result: DiagnosisComparison) -> RenderableType:
    """Two diagnoses: the verdict, then each check's outcome and cost in A and B."""
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col, justify in (("check", "left"), ("A", "left"), ("B", "left"), ("cost A", "right"), ("cost B", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    table.add_column("change")
    styles = {"appeared": "bold red", "disappeared": "bold green", "cost changed": "yellow", "unchanged": "dim"}
    for f in result.findings:
        table.add_row(
            f.id,
            f.outcome_a or "–",
            f.outcome_b or "–",
            fmt_ms(f.cost_a_ms, TABLE),
            fmt_ms(f.cost_b_ms, TABLE),
            Text(f.change, style=styles[f.change]),
        )
    phases = Table(title="typical request (ms)", title_justify="left", show_edge=False, box=None, header_style="bold")
    for col in ("phase", "A", "B", "change"):
        phases.add_column(col, justify="left" if col == "phase" else "right")
    for name, va, vb in result.phases:
        change = "–" if va is None or vb is None else fmt_ms(vb - va, DELTA_BARE)
        phases.add_row(name, fmt_ms(va, TABLE), fmt_ms(vb, TABLE), change)
    parts: list[RenderableType] = [Text(f"A {result.a}   B {result.b}", style="dim"), Text(result.verdict(), "bold")]
    if result.forced and result.workload_differences:
        parts.append(Text("compared despite: " + "; ".join(result.workload_differences), style="yellow"))
    parts += [Text(""), table, Text(""), phases]
    return Panel(Group(*parts), title="[bold]latscope compare: diagnoses", title_align="left")
