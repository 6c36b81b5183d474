"""A diagnosis (its ``latscope.diagnosis/1`` dict) as HTML: where a typical request's time goes (a waterfall of the
median phases), the findings ranked by cost (a bar each, then a card with the cost basis, the rule crossed, the
evidence and the fix), and the lists of what was inconclusive, not tested and ruled out, each with its reason; the
server's batch over the saturation experiment when it ran."""

from __future__ import annotations

from typing import Any

from bokeh.models import ColumnDataSource, FactorRange, HoverTool

from latscope.report.diagnosis import SUMMARY_PHASES
from latscope.report.html.charts import new_figure
from latscope.report.html.gauges import gauge_figures
from latscope.report.html.page import Section, esc
from latscope.report.html.waterfall import Segment, WaterfallRow, waterfall_figure

SEVERITY_COLORS = {"high": "#cf222e", "medium": "#d4a72c", "low": "#8c959f"}
#: Evidence values longer than this (characters) are cut in the cards (the JSON keeps them whole).
EVIDENCE_CHARS = 400


def typical_request_row(data: dict[str, Any]) -> WaterfallRow | None:
    """The median phases of the diagnosis's baseline, end to end, as one waterfall row."""
    summary = data.get("timeline_summary") or {}
    phases = summary.get("phases_ms") or {}
    segments = []
    at = 0.0
    for key, _, color_key in SUMMARY_PHASES:
        ms = phases.get(key)
        if isinstance(ms, int | float) and ms > 0:
            segments.append(Segment(color_key, at, float(ms)))
            at += float(ms)
    if not segments:
        return None
    extra = {
        k.upper().removesuffix("_MS"): float(v)
        for k, v in summary.items()
        if k in ("ttft_ms", "e2e_ms") and isinstance(v, int | float)
    }
    return WaterfallRow("typical request", tuple(segments), facts="median of the baseline's phases", extra=extra)


#: Items of a list shown in a card.
EVIDENCE_LIST_ITEMS = 12


def evidence_text(value: Any) -> str:
    """An evidence value as short text: floats to 3 significant digits, long lists cut."""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, list):
        shown = ", ".join(evidence_text(v) for v in value[:EVIDENCE_LIST_ITEMS])
        return f"[{shown}{', …' if len(value) > EVIDENCE_LIST_ITEMS else ''}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {evidence_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _evidence(evidence: dict[str, Any]) -> str:
    items = []
    for key, value in evidence.items():
        if key in ("batch_series", "level_starts"):
            continue
        text = evidence_text(value)
        if len(text) > EVIDENCE_CHARS:
            text = text[:EVIDENCE_CHARS] + " …"
        items.append(f"<dt>{esc(key)}</dt><dd>{esc(text)}</dd>")
    return "".join(items)


def finding_card(f: dict[str, Any]) -> str:
    """One finding: title and cost, then basis, rule, evidence, fix."""
    severity = str(f.get("severity", "low"))
    cost = f.get("cost_ms")
    cost_text = "" if not isinstance(cost, int | float) else f"{cost:,.1f} ms"
    return (
        f'<div class="finding {esc(severity)}"><span class="cost">{esc(cost_text)}</span>'
        f"<h3>{esc(f.get('title', f.get('id')))} <code>{esc(f.get('id'))}</code></h3>"
        f'<div class="dim">{esc(severity)} severity, {esc(f.get("confidence", "?"))} confidence — cost: '
        f"{esc(f.get('cost_basis', ''))}</div>"
        f"<dl><dt>rule</dt><dd>{esc(f.get('rule', ''))}</dd>{_evidence(f.get('evidence') or {})}"
        f"<dt>fix</dt><dd>{esc(f.get('fix', ''))}</dd></dl></div>"
    )


def cost_figure(findings: list[dict[str, Any]]) -> Any:
    """A bar per finding, longest first: its measured cost in ms."""
    ids = [str(f.get("id")) for f in findings]
    source = ColumnDataSource(
        {
            "id": ids,
            "cost": [float(f.get("cost_ms") or 0.0) for f in findings],
            "basis": [str(f.get("cost_basis", "")) for f in findings],
            "color": [SEVERITY_COLORS.get(str(f.get("severity")), "#8c959f") for f in findings],
        }
    )
    fig = new_figure(
        "findings by measured cost",
        height=70 + 30 * len(ids),
        y_range=FactorRange(factors=list(reversed(ids))),
        x_axis_label="ms",
    )
    bars = fig.hbar(y="id", right="cost", height=0.7, color="color", source=source)
    fig.add_tools(HoverTool(renderers=[bars], tooltips=[("", "@id"), ("cost", "@cost{0.0} ms"), ("per", "@basis")]))
    fig.x_range.start = 0
    fig.ygrid.grid_line_color = None
    return fig


def _outcome_list(title: str, items: list[dict[str, Any]]) -> str:
    if not items:
        return f"<h3>{esc(title)}</h3><p class='dim'>none</p>"
    lis = "".join(f"<li><code>{esc(o.get('id'))}</code> — {esc(o.get('reason', ''))}</li>" for o in items)
    return f"<h3>{esc(title)} ({len(items)})</h3><ul class='outcomes'>{lis}</ul>"


def diagnosis_sections(data: dict[str, Any]) -> list[Section]:
    """The views of a diagnosis: typical request, findings, other outcomes, and the batch when measured."""
    sections = []
    row = typical_request_row(data)
    if row is not None:
        sections.append(
            Section(
                "waterfall",
                "Where a typical request's time goes",
                "The median of each phase over the baseline's requests, end to end; hover for the values.",
                [waterfall_figure([row], "typical request (median phases)")],
            )
        )
    findings = sorted(data.get("findings") or [], key=lambda f: -float(f.get("cost_ms") or 0.0))
    cards = "".join(finding_card(f) for f in findings) or "<p>No finding: nothing tested crossed its rule.</p>"
    sections.append(
        Section(
            "findings",
            f"Findings ({len(findings)})",
            "Ranked by measured cost; each names the rule it crossed, the evidence and the fix.",
            [cost_figure(findings)] if findings else [],
            cards,
        )
    )
    lists = (
        _outcome_list("Inconclusive", data.get("inconclusive") or [])
        + _outcome_list("Not tested", data.get("not_tested") or [])
        + _outcome_list("Ruled out (clear)", data.get("clear") or [])
    )
    sections.append(Section("outcomes", "Inconclusive, not tested, ruled out", "Each with the reason.", [], lists))
    for outcome in [*(data.get("findings") or []), *(data.get("inconclusive") or []), *(data.get("clear") or [])]:
        evidence = outcome.get("evidence") or {}
        if evidence.get("batch_series"):
            charts = gauge_figures(evidence["batch_series"], evidence.get("level_starts") or [])
            if charts:
                sections.append(
                    Section(
                        "batch",
                        "The server's batch during the concurrency sweep",
                        f"From {outcome.get('id')}'s experiment: the target's gauges scraped while "
                        "the load stepped up.",
                        charts,
                    )
                )
            break
    return sections
