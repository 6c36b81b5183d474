"""Recorded requests (``latscope probe --html``) as one HTML page: each request's waterfall beside the phases the
server reported, each stream's token arrivals, and the TTFT / ITL / E2E distributions over the requests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from bokeh.layouts import row as bokeh_row

from latscope.report.html.cdf import cdf_figure, percentile_table
from latscope.report.html.page import Section, render_page
from latscope.report.html.streams import stream_figures, trace_from_timeline
from latscope.report.html.waterfall import row_from_timeline, waterfall_figure
from latscope.timeline import metrics
from latscope.timeline.model import Timeline
from latscope.timeline.redact import redact_url


def probe_sections(timelines: Sequence[Timeline]) -> list[Section]:
    """The views of a list of recorded requests (in the order sent)."""
    rows = [row_from_timeline(t, f"#{i}") for i, t in enumerate(timelines, start=1)]
    sections = [
        Section(
            "waterfall",
            "Requests as waterfalls",
            "Each request's phases (pool wait, dns, connect, tls, send, wait, first token, stream) at their start, "
            "and under it the phases the server reported, laid end to end from the end of sending. Hover a bar for "
            "its exact start and duration; a red × marks a failure or a stale connection's retry.",
            [waterfall_figure(rows, "request phases (ms since each request started)")],
        )
    ]
    traces = [trace_from_timeline(t, f"#{i}") for i, t in enumerate(timelines, start=1)]
    if any(tr.at_ms.size for tr in traces):
        sections.append(
            Section("streams", "Token arrivals", "Every token event of each stream.", stream_figures(traces))
        )
    ok = [t for t in timelines if t.ok]
    series = {
        "TTFT": [v for t in ok if (v := metrics.ttft_ms(t)) is not None],
        "ITL (every gap)": [g for t in ok for g in metrics.itl_ms(t)],
        "E2E": [v for t in ok if (v := metrics.e2e_ms(t)) is not None],
    }
    if series["TTFT"]:
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in series.items()}
        figs = [cdf_figure(k, [("probe", v)]) for k, v in arrays.items()]
        sections.append(
            Section(
                "cdf",
                "Latency distributions",
                "Over the successful requests.",
                [bokeh_row(*figs, sizing_mode="stretch_width")],
                percentile_table([(k, "probe", v) for k, v in arrays.items()]),
            )
        )
    return sections


def probe_html(timelines: Sequence[Timeline], *, target: str = "", model: str = "", dialect: str = "") -> str:
    """The self-contained page of a probe's requests."""
    facts = [("target", redact_url(target)), ("model", model), ("dialect", dialect), ("requests", len(timelines))]
    return render_page(
        "latscope probe", "Each request's timeline, from DNS to the last token.", probe_sections(timelines), facts=facts
    )
