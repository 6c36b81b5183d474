"""A bench run directory as one HTML page (``latscope bench --html``, ``latscope report RUN --html``): the sweep's
summary, waterfalls of requests picked across the TTFT distribution, their streams' token arrivals, TTFT / ITL / E2E
CDFs with a line per step and the exact percentiles from every sample, and the server's batch over the run.

Cost stays bounded whatever the run's size: the waterfalls and streams draw :data:`MAX_WATERFALL_ROWS` and
:data:`MAX_STREAMS` requests, the CDFs a few hundred quantiles each (:mod:`latscope.report.html.cdf`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from bokeh.layouts import row as bokeh_row

from latscope.load.bench import load_summaries
from latscope.report.compare.samples import RunSamples, read_samples
from latscope.report.format import TABLE, fmt_ms, fmt_rate
from latscope.report.html.cdf import cdf_figure, percentile_table
from latscope.report.html.gauges import gauge_figures
from latscope.report.html.page import Section, render_page, table
from latscope.report.html.streams import stream_figures, traces_from_run
from latscope.report.html.waterfall import row_from_request, sample_requests, waterfall_figure
from latscope.runs.storage import read_requests, read_run_json

#: Requests drawn as waterfalls, over all steps.
MAX_WATERFALL_ROWS = 12
#: Streams drawn in the token-arrival charts.
MAX_STREAMS = 10

CDF_METRICS = (("ttft_ms", "TTFT"), ("itl_ms", "ITL (every gap)"), ("e2e_ms", "E2E"))


def summary_table(data: dict[str, Any]) -> str:
    """One row per step: requests, errors, throughput, the headline percentiles, goodput."""
    rows = []
    for s in load_summaries(data):
        o = s.overall

        def p(key: str, q: str, o: Any = o) -> str:
            d = o.metrics.get(key)
            return fmt_ms(None if d is None else float(getattr(d, q)), TABLE)

        rows.append(
            (
                s.label,
                f"{o.requests:,}",
                f"{o.errors:,}",
                fmt_rate(o.throughput_rps, ""),
                fmt_rate(o.output_tokens_per_s, ""),
                p("ttft_ms", "p50"),
                p("ttft_ms", "p99"),
                p("itl_ms", "p99"),
                p("tpot_ms", "p50"),
                p("e2e_ms", "p99"),
                "–" if o.goodput_fraction is None else f"{o.goodput_fraction:.1%}",
            )
        )
    headers = (
        "step",
        "requests",
        "errors",
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p99",
        "TPOT p50",
        "E2E p99",
        "goodput",
    )
    return table(headers, rows)


def cdf_section(samples: RunSamples, title: str = "Latency distributions") -> Section:
    """TTFT, ITL and E2E CDFs, a line per step, and the percentile table."""
    figs = []
    rows = []
    for metric, label in CDF_METRICS:
        series = [(s.label, s.metric(metric)) for s in samples.steps]
        figs.append(cdf_figure(label, series))
        rows += [(label, name, values) for name, values in series]
    return Section(
        "cdf",
        title,
        "Share of successful measured requests (ITL: of every inter-token gap) at or under each latency; the table "
        "gives the exact percentiles from all samples.",
        [bokeh_row(*figs, sizing_mode="stretch_width")],
        percentile_table(rows),
    )


def _picks(measured: pa.Table, steps: list[int]) -> list[tuple[int, str]]:
    per_step = max(3, MAX_WATERFALL_ROWS // max(1, len(steps)))
    step_col = np.asarray(measured.column("step").to_numpy(zero_copy_only=False), dtype=np.int64)
    out: list[tuple[int, str]] = []
    for step in steps:
        index = np.flatnonzero(step_col == step)
        sub = measured.take(pa.array(index))
        for i, why in sample_requests(sub, per_step):
            out.append((int(index[i]), why))
    return out


def run_sections(run_dir: Path) -> tuple[dict[str, Any], list[Section]]:
    """``run.json`` and the views of the run in ``run_dir``."""
    data = read_run_json(run_dir)
    samples = read_samples(run_dir)
    requests = read_requests(run_dir)
    warm = np.asarray(requests.column("warmup").to_numpy(zero_copy_only=False), dtype=bool)
    measured = requests.filter(pa.array(~warm))
    steps = [s.step for s in samples.steps]
    labels = {s.step: s.label for s in samples.steps}
    sections = [
        Section(
            "summary",
            "Summary",
            "Per step: measured requests, throughput and the headline percentiles (ms).",
            [],
            summary_table(data),
        )
    ]
    picks = _picks(measured, steps)
    picked_rows = measured.take(pa.array([i for i, _ in picks], type=pa.int64())).to_pylist() if picks else []
    rows = []
    for (_, why), record in zip(picks, picked_rows, strict=True):
        prefix = f"{labels.get(record['step'], record['step'])} · " if len(steps) > 1 else ""
        rows.append(row_from_request(record, f"{prefix}#{record['request_id']} ({why})"))
    if rows:
        sections.append(
            Section(
                "waterfall",
                "Requests as waterfalls",
                f"{len(rows)} requests picked along the TTFT distribution of each step (fastest to slowest) and the "
                "first failures: the client's phases, and under each the phases the server reported, laid end to end "
                "from the end of sending. Hover a bar for its start and duration.",
                [waterfall_figure(rows, "request phases (ms since each request started)")],
            )
        )
    ok_picks = [
        (r["step"], r["request_id"], label.label) for r, label in zip(picked_rows, rows, strict=True) if r["ok"]
    ]
    if ok_picks:
        chosen = [ok_picks[int(i)] for i in np.unique(np.linspace(0, len(ok_picks) - 1, MAX_STREAMS).astype(int))]
        traces = traces_from_run(run_dir, chosen)
        if traces:
            sections.append(
                Section(
                    "streams",
                    "Token arrivals",
                    f"{len(traces)} of those streams, token by token (thinned to a few hundred points each; every "
                    "coalesced event and the largest gaps kept).",
                    stream_figures(traces),
                )
            )
    sections.append(cdf_section(samples))
    gauges = data.get("server_gauges") or {}
    charts = gauge_figures(gauges.get("points") or [], gauges.get("steps") or [])
    if charts:
        sections.append(
            Section(
                "batch",
                "The server's batch over the run",
                f"Scraped from {gauges.get('url', 'the target')} during the run.",
                charts,
            )
        )
    return data, sections


def run_html(run_dir: Path) -> str:
    """The self-contained HTML page of the bench run in ``run_dir``."""
    data, sections = run_sections(run_dir)
    cfg = data.get("config", {})
    facts = [
        ("target", cfg.get("url")),
        ("model", data.get("model")),
        ("created", data.get("created")),
        ("steps", ", ".join(str(s.get("label")) for s in data.get("steps", []))),
        ("run directory", str(run_dir)),
    ]
    if data.get("interrupted"):
        facts.append(("status", "interrupted: results cover what ran"))
    return render_page("latscope bench", "A load test's timelines and latency distributions.", sections, facts=facts)
