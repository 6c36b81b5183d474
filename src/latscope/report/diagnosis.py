"""A diagnosis drawn for the terminal (rich), from its ``latscope.diagnosis/1`` JSON object.

In reading order: the target; where a typical request's time goes (a waterfall of median phases); the findings,
most severe and costly first, each with its measured cost, the rule it crossed, key evidence and the fix; what was not
tested or was inconclusive, and why; what was ruled out. Rendering from the JSON (not from live objects) means a saved
``--json`` file draws the same report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from latscope.report.batchsize import batch_heatmap
from latscope.report.format import fmt_ms
from latscope.report.waterfall import PHASE_STYLES
from latscope.signals.altsvc import describe_h3

SEVERITY_STYLES = {"high": "bold white on red", "medium": "bold black on yellow", "low": "bold black on grey70"}
#: Summary phases in request order, with their label and the waterfall colour they share with ``latscope probe``.
SUMMARY_PHASES = (
    ("dns", "dns", "dns"),
    ("connect", "connect", "connect"),
    ("tls", "tls", "tls"),
    ("send", "send", "send"),
    ("wait", "wait (server)", "wait"),
    ("first_token", "first token", "first token"),
    ("stream", "stream", "stream"),
)
BAR_WIDTH = 48
#: Evidence entries shown per finding (the JSON keeps them all).
EVIDENCE_ITEMS = 8
#: Longest list shown inline in the evidence line.
EVIDENCE_LIST_ITEMS = 6


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    if isinstance(value, list):
        shown = ", ".join(_value(v) for v in value[:EVIDENCE_LIST_ITEMS])
        more = f", … ({len(value)})" if len(value) > EVIDENCE_LIST_ITEMS else ""
        return f"[{shown}{more}]"
    return str(value)


def target_line(data: Mapping[str, Any]) -> Text:
    """``latscope diagnose URL · model M · HTTP/1.1 · server X · engine vllm · rtt 40.4 ms · upload 19.6 Mbit/s ·
    12.3 s``."""
    target = data.get("target", {})
    text = Text("latscope diagnose ", style="bold")
    text.append(str(target.get("url", "?")))
    parts = [f"model {target.get('model')}"]
    for key in ("http_version", "tls_version"):
        if target.get(key):
            parts.append(str(target[key]))
    if target.get("alpn"):
        parts.append(f"ALPN {target['alpn']}")
    if target.get("server"):
        parts.append(f"server {target['server']}")
    if target.get("engine"):
        parts.append(f"engine {target['engine']}")
    if target.get("rtt_ms") is not None:
        parts.append(f"rtt {target['rtt_ms']:.3g} ms")
    if target.get("upload_mbit_s") is not None:
        parts.append(f"upload {target['upload_mbit_s']:g} Mbit/s")
    if target.get("h3_advertised"):
        parts.append(describe_h3(target["h3_advertised"]))
    parts.append(f"{data.get('duration_s', 0):.1f} s{' (quick)' if data.get('quick') else ''}")
    text.append(" · " + " · ".join(parts), style="dim")
    return text


def timeline_summary(summary: Mapping[str, Any]) -> RenderableType:
    """Where the typical request's time goes: one bar per phase, placed at its median start, scaled to e2e."""
    if not summary.get("requests"):
        return Text("No typical request completed: there is no timeline summary.", style="yellow")
    phases: Mapping[str, float | None] = summary.get("phases_ms", {})
    total = float(summary.get("e2e_ms") or sum(v or 0.0 for v in phases.values()) or 1.0)
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column(width=BAR_WIDTH, no_wrap=True)
    table.add_column(justify="right")
    table.add_column(justify="right", style="dim")
    offset = 0.0
    for key, label, style_key in SUMMARY_PHASES:
        ms = phases.get(key)
        bar = Text(no_wrap=True, overflow="crop")
        if ms:
            start = min(BAR_WIDTH - 1, int(offset / total * BAR_WIDTH))
            length = min(BAR_WIDTH - start, max(1, round(ms / total * BAR_WIDTH)))
            bar.append(" " * start)
            bar.append("█" * length, style=PHASE_STYLES.get(style_key, "white"))
        share = f"{100 * (ms or 0) / total:.0f}%" if total > 0 else ""
        table.add_row(label, bar, fmt_ms(ms), share)
        offset += ms or 0.0
    cadence = Text()
    cadence.append(f"TTFT {fmt_ms(summary.get('ttft_ms'))}", style="bold")
    cadence.append(f" · e2e {fmt_ms(summary.get('e2e_ms'))}")
    cadence.append(f" · ITL p50 {fmt_ms(summary.get('itl_ms_p50'))} p95 {fmt_ms(summary.get('itl_ms_p95'))}")
    cadence.append(f" · TPOT {fmt_ms(summary.get('tpot_ms'))}")
    cold = summary.get("cold_request_phases_ms", {})
    setup = [f"{k} {fmt_ms(cold.get(k))}" for k in ("dns", "connect", "tls") if cold.get(k) is not None]
    note = Text(
        f"median of {summary['requests']} requests ({summary.get('prompt_tokens')}-token prompt, "
        f"{summary.get('max_tokens')} tokens)" + (f"; the first, cold one paid {', '.join(setup)}" if setup else ""),
        style="dim",
    )
    return Panel(
        Group(table, cadence, note), title="Where a typical request's time goes", title_align="left", expand=False
    )


def finding_panel(finding: Mapping[str, Any], rank: int) -> Panel:
    """One finding: severity, title and id, cost and its basis, rule, key evidence, confidence, fix."""
    head = Text()
    severity = str(finding.get("severity", "low"))
    head.append(f" {severity.upper()} ", style=SEVERITY_STYLES.get(severity, "bold"))
    head.append(f" {finding.get('id')} ", style="bold")
    title = Text(str(finding.get("title", "")), style="bold")
    cost = Text()
    cost.append("cost ", style="dim")
    cost.append(fmt_ms(finding.get("cost_ms")), style="bold")
    cost.append(f" — {finding.get('cost_basis', '')}")
    rule = Text("why: ", style="dim")
    rule.append(str(finding.get("rule", "")))
    evidence = finding.get("evidence", {})
    items = [(k, v) for k, v in evidence.items() if not isinstance(v, dict)][:EVIDENCE_ITEMS]
    ev_text = Text("evidence: ", style="dim")
    ev_text.append("; ".join(f"{k} {_value(v)}" for k, v in items))
    fix = Text("fix: ", style="dim")
    fix.append(str(finding.get("fix", "")), style="green")
    confidence = Text(f"confidence {finding.get('confidence')}", style="dim")
    return Panel(
        Group(title, cost, rule, ev_text, fix, confidence), title=head, title_align="left", subtitle=f"#{rank}"
    )


def _reasons_table(title: str, rows: Sequence[Mapping[str, Any]], style: str) -> Table:
    table = Table(title=title, title_justify="left", title_style=f"bold {style}", show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for row in rows:
        table.add_row(str(row.get("id")), str(row.get("reason")))
    return table


def _saturation_heatmap(data: Mapping[str, Any]) -> RenderableType | None:
    """The batch-size heatmap of the concurrency sweep, when the target's metrics gave one."""
    for key in ("findings", "clear", "inconclusive"):
        for outcome in data.get(key, []):
            if outcome.get("id") == "capacity-saturation":
                evidence = outcome.get("evidence", {})
                return batch_heatmap(evidence.get("batch_series", []), evidence.get("level_starts", []))
    return None


def diagnosis_report(data: Mapping[str, Any]) -> RenderableType:
    """The whole report for a ``latscope.diagnosis/1`` object."""
    parts: list[RenderableType] = [target_line(data), timeline_summary(data.get("timeline_summary", {}))]
    findings: Sequence[Mapping[str, Any]] = data.get("findings", [])
    if findings:
        parts.append(Text(f"{len(findings)} finding(s), most costly first", style="bold"))
        parts += [finding_panel(f, i) for i, f in enumerate(findings, start=1)]
    elif data.get("diagnosed") is False:
        parts.append(Text("Could not diagnose: no check could measure anything (see Not tested).", style="bold red"))
    else:
        parts.append(Text("No bottleneck found among the checks that ran.", style="bold green"))
    if data.get("interrupted"):
        parts.append(Text("Interrupted: the experiments after the one running were not run.", style="bold yellow"))
    heatmap = _saturation_heatmap(data)
    if heatmap is not None:
        parts.append(heatmap)
    skipped = [*data.get("not_tested", []), *data.get("inconclusive", [])]
    if data.get("not_tested"):
        parts.append(_reasons_table("Not tested", data["not_tested"], "yellow"))
    if data.get("inconclusive"):
        parts.append(_reasons_table("Inconclusive", data["inconclusive"], "yellow"))
    if data.get("clear"):
        parts.append(_reasons_table("Ruled out", data["clear"], "green"))
    failed = [e for e in data.get("experiments", []) if e.get("status") != "ok"]
    if failed and not skipped:
        parts.append(_reasons_table("Experiments", [{"id": e["name"], "reason": e["message"]} for e in failed], "red"))
    return Group(*parts)
