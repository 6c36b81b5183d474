"""Self-contained HTML reports (``--html FILE``): one page per report, bokeh's JavaScript and every chart's data
inlined, so the file opens offline and can be mailed. One module per view:

* :mod:`~latscope.report.html.waterfall` — requests as waterfalls beside the server-reported phases
* :mod:`~latscope.report.html.streams` — each stream's token arrivals and inter-token gaps, coalesced events marked
* :mod:`~latscope.report.html.cdf` — TTFT, ITL and E2E CDFs, a line per step, exact percentiles
* :mod:`~latscope.report.html.gauges` — the server's batch (running, waiting, KV usage) over time
* :mod:`~latscope.report.html.diagnosis` — findings ranked by cost, and the other outcomes
* :mod:`~latscope.report.html.compare` — two runs or two diagnoses side by side

and one per page: :func:`probe_html`, :func:`run_html`, :func:`diagnosis_html` (plus the comparisons). Each is a
pure function of its data (timelines, a run directory, a diagnosis dict) returning the page as a string.
"""

from __future__ import annotations

from typing import Any

from latscope.report.html.diagnosis import diagnosis_sections
from latscope.report.html.page import render_page
from latscope.report.html.probe import probe_html
from latscope.report.html.run import run_html


def diagnosis_html(data: dict[str, Any]) -> str:
    """The self-contained page of a diagnosis (its ``latscope.diagnosis/1`` dict)."""
    target = data.get("target") or {}
    facts = [
        ("target", target.get("url")),
        ("model", target.get("model")),
        ("HTTP", target.get("http_version")),
        ("took", f"{data.get('duration_s', 0):.1f} s" + (" (quick)" if data.get("quick") else "")),
    ]
    return render_page(
        "latscope diagnose",
        "Where the time goes, and which bottleneck is responsible.",
        diagnosis_sections(data),
        facts=facts,
    )


__all__ = ["diagnosis_html", "probe_html", "run_html"]
