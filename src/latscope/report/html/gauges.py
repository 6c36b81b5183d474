"""The server's batch over time, from its metrics: the running-requests gauge (the batch an engine steps over), the
waiting one (what queued behind it) and KV-cache usage, as lines over the run's seconds with each load step's start
marked; and the same as a heatmap strip (one cell per scrape interval, colour = the gauge's value scaled to its
maximum), where a batch that fills and a queue that builds read at a glance.

The points are what ``run.json`` keeps in ``server_gauges`` (``[seconds, running, waiting, kv_usage]``, a scrape
about once a second) or what a diagnosis keeps in its saturation evidence (``batch_series``: ``[seconds, running,
waiting]``, and ``level_starts``: ``[label, seconds]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, LinearColorMapper
from bokeh.models.annotations import Span
from bokeh.palettes import Viridis256

from latscope.report.html.charts import new_figure

#: Most heatmap cells per gauge: a long run's scrapes are binned (the peak of each bin) to about the chart's pixels.
MAX_HEAT_CELLS = 400
#: Gauges by their position in a point, with a colour each.
GAUGES: tuple[tuple[int, str, str], ...] = (
    (1, "running", "#1f77b4"),
    (2, "waiting", "#d62728"),
    (3, "kv usage", "#2ca02c"),
)


def _column(points: Sequence[Sequence[float | None]], index: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    values = [p[index] if len(p) > index else None for p in points]
    return np.asarray([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _bins(at: np.ndarray[Any, np.dtype[np.float64]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Cell edges (s): one cell per scrape, or :data:`MAX_HEAT_CELLS` equal cells over a long run."""
    if at.size <= MAX_HEAT_CELLS:
        last = at[-1] + (at[-1] - at[-2])
        return np.append(at, last)
    return np.linspace(float(at[0]), float(at[-1]), MAX_HEAT_CELLS + 1)


def gauge_figures(points: Sequence[Sequence[float | None]], starts: Sequence[Sequence[object]]) -> list[Any]:
    """The series chart and the heatmap strip; empty without at least two points."""
    if len(points) < 2:
        return []
    at = _column(points, 0)
    series = new_figure(
        "the server's batch over time (its gauges)",
        height=280,
        x_axis_label="s since the run started",
        y_axis_label="requests",
    )
    hover_renderers = []
    present = []
    for index, name, color in GAUGES:
        values = _column(points, index)
        if np.all(np.isnan(values)):
            continue
        present.append((name, values))
        if name == "kv usage":
            continue  # a share 0…1: drawn in the heatmap only, where each row has its own scale
        source = ColumnDataSource({"at": at, "v": values, "name": [name] * at.size})
        hover_renderers.append(
            series.step(x="at", y="v", source=source, mode="after", color=color, line_width=2, legend_label=name)
        )
    series.add_tools(
        HoverTool(
            renderers=hover_renderers, tooltips=[("", "@name"), ("at", "@at{0.0} s"), ("value", "@v")], mode="vline"
        )
    )
    for start in starts:
        if len(start) >= 2:
            series.add_layout(
                Span(location=float(str(start[1])), dimension="height", line_dash="dashed", line_color="#6e7781")
            )
    series.legend.location = "top_left"
    labels = ", ".join(f"{s[0]} at {float(str(s[1])):.1f} s" for s in starts if len(s) >= 2)
    if labels:
        series.title.text += f" — dashed: load steps ({labels})"

    rows = [name for name, _ in present]
    edges = _bins(at)
    cells: dict[str, list[Any]] = {"x": [], "w": [], "y": [], "v": [], "scaled": [], "at": []}
    cell_of = np.clip(np.searchsorted(edges, at, side="right") - 1, 0, edges.size - 2)
    for name, values in present:
        top = float(np.nanmax(values))
        for b in range(edges.size - 1):
            in_bin = values[(cell_of == b) & ~np.isnan(values)]
            if in_bin.size == 0:
                continue
            peak = float(in_bin.max())  # the highest value the gauge had in the cell, as the terminal heatmap
            cells["x"].append((edges[b] + edges[b + 1]) / 2)
            cells["w"].append(edges[b + 1] - edges[b])
            cells["y"].append(name)
            cells["v"].append(peak)
            cells["scaled"].append(peak / top if top > 0 else 0.0)
            cells["at"].append(float(edges[b]))
    heat = new_figure(
        "heatmap (colour: the gauge's value over its maximum)",
        height=60 + 34 * len(rows),
        y_range=FactorRange(factors=list(reversed(rows))),
        x_axis_label="s since the run started",
    )
    heat.x_range = series.x_range
    mapper = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
    rects = heat.rect(
        x="x",
        y="y",
        width="w",
        height=0.95,
        source=ColumnDataSource({k: v if k == "y" else np.asarray(v, dtype=np.float64) for k, v in cells.items()}),
        fill_color={"field": "scaled", "transform": mapper},
        line_color=None,
    )
    heat.add_tools(HoverTool(renderers=[rects], tooltips=[("", "@y"), ("at", "@at{0.0} s"), ("value", "@v")]))
    heat.ygrid.grid_line_color = None
    return [series, heat]
