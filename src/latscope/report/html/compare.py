"""A comparison as one HTML page (``latscope compare --html``).

Two bench runs: per step the verdict, every metric's change as a point with its confidence interval (in percent of
A's value, so TTFT and ITL share an axis), where TTFT's and E2E's changes live (a bar per phase), the table of
numbers, and A's and B's CDFs overlaid. Two diagnoses: the verdict, each check's outcome and cost in both, and the
costs side by side.
"""

from __future__ import annotations

from typing import Any

from bokeh.layouts import row as bokeh_row
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
from bokeh.models.annotations import Span, Whisker
from bokeh.transform import dodge

from latscope.report.compare.result import (
    ATTRIBUTED,
    LABELS,
    QUANTILES,
    DiagnosisComparison,
    RunComparison,
    StepComparison,
    q_label,
)
from latscope.report.compare.samples import RunSamples
from latscope.report.format import DELTA, DELTA_BARE, TABLE, fmt_ms
from latscope.report.html.cdf import cdf_figure
from latscope.report.html.charts import new_figure
from latscope.report.html.page import Markup, Section, esc, render_page, table

#: A phase whose share of every percentile's change is under this (ms) is left out of the charts (the JSON keeps it).
SHOWN_PHASE_MS = 0.005
#: p50, p95, p99 bars.
QUANTILE_COLORS = ("#1f77b4", "#ff7f0e", "#d62728")
#: How a check's change is coloured: a finding gone is good news.
CHANGE_CLASSES = {"disappeared": "sig-better", "appeared": "sig-worse", "cost changed": "warn"}


def _cell(metric: str, value: float) -> str:
    return f"{value:.1%}" if metric in ("goodput", "error_rate") else fmt_ms(value, TABLE)


def _delta(metric: str, value: float) -> str:
    if metric in ("goodput", "error_rate"):
        return f"{'−' if value < 0 else '+'}{abs(value) * 100:.1f} pt"
    return fmt_ms(value, DELTA_BARE)


def changes_html(step: StepComparison) -> str:
    """The table of every change with its interval."""
    rows = []
    for c in step.changes:
        d = c.diff
        better = d.delta > 0 if c.metric == "goodput" else d.delta < 0
        css = "sig-better" if better else "sig-worse"
        verdict = (
            Markup(f'<span class="{css}">significant</span>') if d.significant else Markup('<span class="dim">–</span>')
        )
        rows.append(
            (
                c.label,
                _cell(c.metric, d.a),
                _cell(c.metric, d.b),
                _delta(c.metric, d.delta),
                f"[{_delta(c.metric, d.low)}, {_delta(c.metric, d.high)}]",
                verdict,
            )
        )
    return table(
        (
            "metric",
            "A",
            "B",
            "B − A",
            f"{step.changes[0].diff.confidence:.0%} interval" if step.changes else "interval",
            "",
        ),
        rows,
    )


def interval_figure(step: StepComparison) -> Any:
    """Each latency percentile's change in percent of A, with its interval as whiskers."""
    latency = [c for c in step.changes if c.q is not None and c.diff.a > 0]
    labels = [c.label for c in latency]
    source = ColumnDataSource(
        {
            "label": labels,
            "rel": [c.diff.delta / c.diff.a * 100 for c in latency],
            "low": [c.diff.low / c.diff.a * 100 for c in latency],
            "high": [c.diff.high / c.diff.a * 100 for c in latency],
            "delta": [fmt_ms(c.diff.delta, DELTA) for c in latency],
            "interval": [f"[{fmt_ms(c.diff.low, DELTA_BARE)}, {fmt_ms(c.diff.high, DELTA_BARE)}]" for c in latency],
            "color": [
                "#6e7781" if not c.diff.significant else "#1a7f37" if c.diff.delta < 0 else "#cf222e" for c in latency
            ],
        }
    )
    fig = new_figure(
        "change B − A, percent of A (whiskers: the interval; grey: not significant)",
        height=70 + 24 * len(labels),
        y_range=FactorRange(factors=list(reversed(labels))),
        x_axis_label="% of A",
    )
    fig.add_layout(
        Whisker(base="label", lower="low", upper="high", source=source, dimension="width", line_color="color")
    )
    ends = [v for c in latency for v in (c.diff.low / c.diff.a * 100, c.diff.high / c.diff.a * 100)]
    if ends:
        pad = 0.05 * (max(ends) - min(ends) or 1.0)
        fig.x_range = Range1d(start=min(min(ends), 0.0) - pad, end=max(max(ends), 0.0) + pad)
    points = fig.scatter(x="rel", y="label", source=source, size=9, color="color")
    fig.add_layout(Span(location=0, dimension="height", line_color="#1f2328", line_width=1))
    fig.add_tools(
        HoverTool(renderers=[points], tooltips=[("", "@label"), ("change", "@delta"), ("interval", "@interval")])
    )
    fig.ygrid.grid_line_color = None
    return fig


def shown_phases(step: StepComparison, keys: list[tuple[str, float]]) -> list[str]:
    """The phases of the attributions ``keys`` that changed by at least :data:`SHOWN_PHASE_MS` in one of them."""
    names = dict.fromkeys(name for k in keys for name, _ in step.attributions[k].phases)
    return [n for n in names if any(abs(dict(step.attributions[k].phases).get(n, 0.0)) >= SHOWN_PHASE_MS for k in keys)]


def attribution_figure(step: StepComparison, metric: str) -> Any | None:
    """Where ``metric``'s change lives: per phase a bar for each percentile (ms, B − A)."""
    keys = [(metric, q) for q in QUANTILES if (metric, q) in step.attributions]
    phases = shown_phases(step, keys) if keys else []
    if not phases:
        return None
    fig = new_figure(
        f"where {LABELS[metric]}'s change lives (ms, B − A, requests around each percentile)",
        height=90 + 30 * len(phases),
        y_range=FactorRange(factors=list(reversed(phases))),
        x_axis_label="ms",
    )
    renderers = []
    for index, key in enumerate(keys):
        changes = dict(step.attributions[key].phases)
        source = ColumnDataSource(
            {"phase": phases, "v": [changes.get(n, 0.0) for n in phases], "q": [q_label(key[1])] * len(phases)}
        )
        offset = (1 - index) * 0.27
        renderers.append(
            fig.hbar(
                y=dodge("phase", offset, range=fig.y_range),
                right="v",
                left=0,
                height=0.25,
                color=QUANTILE_COLORS[index % len(QUANTILE_COLORS)],
                source=source,
                legend_label=q_label(key[1]),
            )
        )
    fig.add_tools(HoverTool(renderers=renderers, tooltips=[("", "@phase @q"), ("change", "@v{+0.000} ms")]))
    fig.add_layout(Span(location=0, dimension="height", line_color="#1f2328", line_width=1))
    fig.ygrid.grid_line_color = None
    fig.legend.location = "bottom_right"
    return fig


def compare_runs_html(result: RunComparison, a: RunSamples, b: RunSamples) -> str:
    """The page of two bench runs compared."""
    sections = []
    for step in result.steps:
        charts = [interval_figure(step)]
        for metric in ATTRIBUTED:
            fig = attribution_figure(step, metric)
            if fig is not None:
                charts.append(fig)
        label = step.label_a if step.label_a == step.label_b else f"{step.label_a} vs {step.label_b}"
        sections.append(
            Section(f"step{step.step}", f"Step {step.step}: {label}", step.verdict(), charts, changes_html(step))
        )
    cdfs = []
    for metric, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL (every gap)"), ("e2e_ms", "E2E")):
        series = []
        for sa, sb in zip(a.steps, b.steps, strict=False):
            suffix = f" · {sa.label}" if len(a.steps) > 1 else ""
            series += [(f"A{suffix}", sa.metric(metric)), (f"B{suffix}", sb.metric(metric))]
        cdfs.append(cdf_figure(label, series))
    sections.append(
        Section(
            "cdf",
            "Distributions, A and B",
            "Every sample of both runs.",
            [bokeh_row(*cdfs, sizing_mode="stretch_width")],
        )
    )
    facts: list[tuple[str, Any]] = [
        ("A (before)", result.a),
        ("B (after)", result.b),
        (
            "intervals",
            f"{result.confidence:.0%} bootstrap, {result.resamples:,} draws; "
            f"changes under {result.min_change_share:.0%} of A not called significant",
        ),
    ]
    if result.workload_differences:
        facts.append(("compared despite", "; ".join(result.workload_differences)))
    return render_page(
        "latscope compare", " · ".join(s.verdict() for s in result.steps) or "no common step", sections, facts=facts
    )


def compare_diagnoses_html(result: DiagnosisComparison, a: dict[str, Any], b: dict[str, Any]) -> str:
    """The page of two diagnoses compared."""
    rows = [
        (
            f.id,
            f.outcome_a or "–",
            f.outcome_b or "–",
            fmt_ms(f.cost_a_ms, TABLE),
            fmt_ms(f.cost_b_ms, TABLE),
            Markup(f'<span class="{CHANGE_CLASSES.get(f.change, "dim")}">{esc(f.change)}</span>'),
        )
        for f in result.findings
    ]
    charts = []
    costly = [f for f in result.findings if f.cost_a_ms is not None or f.cost_b_ms is not None]
    if costly:
        ids = [f.id for f in costly]
        source = ColumnDataSource(
            {"id": ids, "a": [f.cost_a_ms or 0.0 for f in costly], "b": [f.cost_b_ms or 0.0 for f in costly]}
        )
        fig = new_figure(
            "finding costs, A and B (ms)",
            height=80 + 34 * len(ids),
            y_range=FactorRange(factors=list(reversed(ids))),
            x_axis_label="ms",
        )
        ra = fig.hbar(
            y=dodge("id", 0.18, range=fig.y_range),
            right="a",
            height=0.34,
            color="#cf222e",
            source=source,
            legend_label="A",
        )
        rb = fig.hbar(
            y=dodge("id", -0.18, range=fig.y_range),
            right="b",
            height=0.34,
            color="#1f77b4",
            source=source,
            legend_label="B",
        )
        fig.add_tools(HoverTool(renderers=[ra, rb], tooltips=[("", "@id"), ("A", "@a{0.0} ms"), ("B", "@b{0.0} ms")]))
        fig.x_range.start = 0
        charts.append(fig)
    phases = table(
        ("phase", "A", "B", "B − A"),
        [
            (
                name,
                fmt_ms(va, TABLE),
                fmt_ms(vb, TABLE),
                "–" if va is None or vb is None else fmt_ms(vb - va, DELTA_BARE),
            )
            for name, va, vb in result.phases
        ],
    )
    sections = [
        Section(
            "findings",
            "Findings, A and B",
            "Each check's outcome and cost in both diagnoses.",
            charts,
            table(("check", "A", "B", "cost A", "cost B", "change"), rows),
        ),
        Section("typical", "A typical request (ms)", "The baseline's median phases in each.", [], phases),
    ]
    facts: list[tuple[str, Any]] = [
        ("A (before)", result.a),
        ("B (after)", result.b),
        ("targets", f"{(a.get('target') or {}).get('url')} · {(b.get('target') or {}).get('url')}"),
    ]
    return render_page("latscope compare", result.verdict(), sections, facts=facts)
