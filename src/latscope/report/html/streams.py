"""Each stream's token arrivals over time: tokens received so far against ms since the request started (one line
per stream), and every inter-token gap against its arrival time, so a stall shows as a step in the first chart and a
spike in the second. An event that arrived in the same socket read as the previous one (coalesced: something between
the server and the client held it back) is drawn as a red diamond.

A long run has millions of events: :func:`thin` keeps at most :data:`MAX_POINTS_PER_STREAM` per stream — evenly
spaced ones, every coalesced one and the largest gaps — so the page stays small; the exact percentiles are computed
elsewhere from all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from bokeh.models import ColumnDataSource, HoverTool

from latscope.report.html.charts import new_figure, step_color
from latscope.runs.storage import EVENTS_FILE
from latscope.timeline.model import TOKEN_KINDS, Timeline
from latscope.units import NS_PER_MS

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Points kept per stream in the per-event charts.
MAX_POINTS_PER_STREAM = 400
#: Of those, the largest gaps always kept (the stalls a reader looks for).
KEEP_LARGEST_GAPS = 40


@dataclass(frozen=True, slots=True)
class StreamTrace:
    """One stream's token-bearing events: arrival (ms since the request started), tokens received so far, the gap
    to the previous token event (ms; NaN for the first) and whether it shared a read with the previous event."""

    label: str
    at_ms: FloatArray
    tokens: FloatArray
    gap_ms: FloatArray
    coalesced: BoolArray
    events: int  #: token events in the whole stream (before thinning)


def trace_from_timeline(t: Timeline, label: str) -> StreamTrace:
    """The token events of one recorded request."""
    at, tokens, gaps, coalesced = [], [], [], []
    total = 0
    previous_read: int | None = None
    previous_token_at: int | None = None
    for e in t.events:
        same_read = previous_read is not None and e.read_index == previous_read
        previous_read = e.read_index
        if e.kind not in TOKEN_KINDS:
            continue
        total += e.tokens
        at.append((e.at_ns - t.started_ns) / NS_PER_MS)
        tokens.append(total)
        gaps.append(np.nan if previous_token_at is None else (e.at_ns - previous_token_at) / NS_PER_MS)
        coalesced.append(same_read)
        previous_token_at = e.at_ns
    return StreamTrace(
        label,
        np.asarray(at, dtype=np.float64),
        np.asarray(tokens, dtype=np.float64),
        np.asarray(gaps, dtype=np.float64),
        np.asarray(coalesced, dtype=bool),
        len(at),
    )


def traces_from_run(run_dir: Path, picks: Sequence[tuple[int, int, str]]) -> list[StreamTrace]:
    """The token events of the requests ``picks`` (``(step, request_id, label)``) of a run's ``events.parquet``."""
    path = run_dir / EVENTS_FILE
    if not path.exists() or not picks:
        return []
    columns = ["step", "request_id", "at_ms", "kind", "tokens", "gap_ms", "coalesced"]
    wanted = {(s, r): label for s, r, label in picks}
    table = pq.read_table(path, columns=columns, filters=[("request_id", "in", sorted({r for _, r, _ in picks}))])
    kinds = pc.cast(table.column("kind"), "string")
    table = table.filter(pc.is_in(kinds, pa.array(sorted(str(k) for k in TOKEN_KINDS))))
    steps = np.asarray(table.column("step").to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = np.asarray(table.column("request_id").to_numpy(zero_copy_only=False), dtype=np.int64)
    at = np.asarray(table.column("at_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    tokens = np.asarray(table.column("tokens").to_numpy(zero_copy_only=False), dtype=np.float64)
    gaps = np.asarray(table.column("gap_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    coalesced = np.asarray(table.column("coalesced").to_numpy(zero_copy_only=False), dtype=bool)
    out = []
    for (step, request_id), label in wanted.items():
        mask = (steps == step) & (ids == request_id)
        order = np.argsort(at[mask], kind="stable")
        out.append(
            StreamTrace(
                label,
                at[mask][order],
                np.cumsum(tokens[mask][order]),
                gaps[mask][order],
                coalesced[mask][order],
                int(mask.sum()),
            )
        )
    return out


def thin(trace: StreamTrace, limit: int = MAX_POINTS_PER_STREAM) -> StreamTrace:
    """At most ``limit`` points: evenly spaced ones plus every coalesced one and the :data:`KEEP_LARGEST_GAPS`
    largest gaps (the first and last always)."""
    n = trace.at_ms.size
    if n <= limit:
        return trace
    keep = np.zeros(n, dtype=bool)
    keep[np.linspace(0, n - 1, limit // 2).astype(int)] = True
    gaps = np.nan_to_num(trace.gap_ms, nan=-1.0)
    keep[np.argsort(gaps)[-KEEP_LARGEST_GAPS:]] = True
    coalesced = np.flatnonzero(trace.coalesced)
    keep[coalesced[: max(0, limit - int(keep.sum()))]] = True
    index = np.flatnonzero(keep)
    return StreamTrace(
        trace.label, trace.at_ms[index], trace.tokens[index], trace.gap_ms[index], trace.coalesced[index], trace.events
    )


def stream_figures(traces: Sequence[StreamTrace]) -> list[Any]:
    """Two charts: tokens received over time (a line per stream), and each gap against its arrival time. All
    streams share one data source per glyph (a few renderers whatever the number of streams: the page stays quick
    to build and to draw)."""
    cumulative = new_figure(
        "tokens received over time (red ◆: arrived in the same read as the previous event)",
        height=360,
        x_axis_label="ms since the request started",
        y_axis_label="tokens received",
    )
    gaps = new_figure(
        "inter-token gap at each arrival",
        height=300,
        x_axis_label="ms since the request started",
        y_axis_label="gap to the previous token (ms)",
    )
    gaps.x_range = cumulative.x_range
    thinned = [thin(t) for t in traces if t.at_ms.size]
    if not thinned:
        return [cumulative, gaps]
    colors = [step_color(i) for i in range(len(thinned))]
    # a staircase per stream: the count holds until the next arrival
    xs = [np.repeat(t.at_ms, 2)[1:] for t in thinned]
    ys = [np.repeat(t.tokens, 2)[:-1] for t in thinned]
    cumulative.multi_line(
        xs="xs", ys="ys", source=ColumnDataSource({"xs": xs, "ys": ys, "color": colors}), color="color", alpha=0.8
    )
    points = ColumnDataSource(
        {
            "at": np.concatenate([t.at_ms for t in thinned]),
            "tokens": np.concatenate([t.tokens for t in thinned]),
            "gap": np.nan_to_num(np.concatenate([t.gap_ms for t in thinned]), nan=0.0),
            "coalesced": np.concatenate([np.where(t.coalesced, "yes", "no") for t in thinned]),
            "stream": np.concatenate([np.full(t.at_ms.size, t.label) for t in thinned]),
            "color": np.concatenate([np.full(t.at_ms.size, c) for t, c in zip(thinned, colors, strict=True)]),
        }
    )
    on_cumulative = cumulative.scatter(x="at", y="tokens", source=points, color="color", size=3)
    on_gaps = gaps.scatter(x="at", y="gap", source=points, color="color", size=4, alpha=0.7)
    merged = {
        "at": np.concatenate([t.at_ms[t.coalesced] for t in thinned]),
        "tokens": np.concatenate([t.tokens[t.coalesced] for t in thinned]),
        "gap": np.nan_to_num(np.concatenate([t.gap_ms[t.coalesced] for t in thinned])),
    }
    if merged["at"].size:
        marks = ColumnDataSource(merged)
        cumulative.scatter(x="at", y="tokens", source=marks, marker="diamond", size=9, color="#cf222e")
        gaps.scatter(x="at", y="gap", source=marks, marker="diamond", size=9, color="#cf222e")
    tooltips = [
        ("stream", "@stream"),
        ("arrived", "@at{0.000} ms"),
        ("tokens so far", "@tokens"),
        ("gap", "@gap{0.000} ms"),
        ("coalesced", "@coalesced"),
    ]
    cumulative.add_tools(HoverTool(renderers=[on_cumulative], tooltips=tooltips))
    gaps.add_tools(HoverTool(renderers=[on_gaps], tooltips=tooltips))
    return [cumulative, gaps]
