"""Latency distributions as CDFs: the share of requests (or gaps) at or under each latency, one line per sweep step
(or per run), with the exact p50/p95/p99 in a table beside.

A line is drawn through at most :data:`MAX_POINTS` quantiles computed from *all* samples (evenly spaced in
probability, denser in the tail where p99 lives), so a million inter-token gaps cost as much page as a hundred and
the line passes through the exact percentiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.models.annotations import Legend, LegendItem

from latscope.report.format import TABLE, fmt_ms
from latscope.report.html.charts import new_figure, step_color
from latscope.report.html.page import table

FloatArray = npt.NDArray[np.float64]

#: Points per CDF line.
MAX_POINTS = 600
#: Percentiles in the table beside the charts (0…1).
TABLE_QUANTILES = (0.5, 0.9, 0.95, 0.99)


def cdf_points(values: npt.ArrayLike, max_points: int = MAX_POINTS) -> tuple[FloatArray, FloatArray]:
    """``(latency, share)`` along the empirical CDF of ``values`` (NaN ignored): every sample when there are at most
    ``max_points``, else quantiles at a probability grid (two thirds of it up to p90, a third from p90 to the max)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[~np.isnan(x)]
    if x.size == 0:
        return np.empty(0), np.empty(0)
    if x.size <= max_points:
        return x, np.arange(1, x.size + 1) / x.size
    body = np.linspace(0.0, 0.9, (2 * max_points) // 3, endpoint=False)
    tail = 1.0 - np.geomspace(0.1, 1.0 / x.size, max_points - body.size)
    probs = np.unique(np.clip(np.concatenate([body, tail, [1.0]]), 0.0, 1.0))
    return np.quantile(x, probs), probs


def cdf_figure(title: str, series: Sequence[tuple[str, FloatArray]]) -> Any:
    """One CDF chart: a line per ``(name, samples)`` (ms on a linear axis, so 0 ms gaps of coalesced events show)."""
    fig = new_figure(title, height=300, x_axis_label="ms", y_axis_label="share at or under")
    items = []
    for index, (name, values) in enumerate(series):
        x, p = cdf_points(values)
        if x.size == 0:
            continue
        source = ColumnDataSource({"x": x, "p": p * 100, "name": [name] * x.size, "n": [int(np.size(values))] * x.size})
        line = fig.line(x="x", y="p", source=source, color=step_color(index), line_width=2)
        fig.add_tools(
            HoverTool(
                renderers=[line],
                tooltips=[("", "@name"), ("latency", "@x{0.000} ms"), ("percentile", "@p{0.0}"), ("samples", "@n")],
                mode="vline",
            )
        )
        items.append(LegendItem(label=name, renderers=[line]))
    if items:
        fig.add_layout(Legend(items=items, location="bottom_right", label_text_font_size="11px"))
    fig.y_range.start, fig.y_range.end = 0, 100
    return fig


def percentile_table(rows: Sequence[tuple[str, str, FloatArray]]) -> str:
    """``(metric, series name, samples)`` → an HTML table of the exact percentiles (ms) and the sample count."""
    out = []
    for metric, name, values in rows:
        x = np.asarray(values, dtype=np.float64)
        x = x[~np.isnan(x)]
        if x.size == 0:
            out.append((metric, name, *("–" for _ in TABLE_QUANTILES), "0"))
            continue
        qs = np.quantile(x, TABLE_QUANTILES)
        out.append((metric, name, *(fmt_ms(float(v), TABLE) for v in qs), f"{x.size:,}"))
    return table(("metric", "", *(f"p{q * 100:g}" for q in TABLE_QUANTILES), "samples"), out)
