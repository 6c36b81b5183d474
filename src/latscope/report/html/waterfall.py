"""Requests drawn as waterfalls: one bar row per request (pool wait, dns, connect, tls, send, wait, first token,
stream, each placed at its start, in ms since the request started), and under it the phases the server reported
about itself (parse, validate, queue, prefill, decode), laid end to end from the moment the request was fully sent
(the server cannot start before it has the body; it says how long each phase took, not when). Hovering a bar gives
the exact start and duration. A request sent again after a stale kept-alive connection failed, and a request that
failed, carry a marker with the error. A bench request retried under ``--retries`` starts with its earlier attempts
(``retry`` bars) and the waits after each (``backoff``), phases of their own.

Rows come from :class:`~latscope.timeline.model.Timeline` objects (probe) or from ``requests.parquet`` rows (a bench
run, which stores each phase's duration).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.models.annotations import LabelSet, Legend, LegendItem

from latscope.report.html.charts import new_figure, phase_color
from latscope.report.waterfall import phase_spans
from latscope.timeline.model import PHASES_BEFORE_FIRST_TOKEN, ServerPhase, Timeline
from latscope.units import NS_PER_MS

#: Server phases drawn end to end, in the order a request goes through them (``window_wait`` is inside ``queue``).
SERVER_SEQUENCE: tuple[str, ...] = (
    *(str(p) for p in PHASES_BEFORE_FIRST_TOKEN if p is not ServerPhase.WINDOW_WAIT),
    str(ServerPhase.DECODE),
)
#: Whole-request server measures, drawn as one bar when the server reported no phase of :data:`SERVER_SEQUENCE`.
SERVER_OVERALL: tuple[str, ...] = (str(ServerPhase.E2E), str(ServerPhase.PROCESSING), str(ServerPhase.UPSTREAM))
#: A bar is labelled with its phase and duration when it is at least this share of the axis wide.
LABEL_MIN_SHARE = 0.07
#: Pixels per bar row.
ROW_PX = 26


@dataclass(frozen=True, slots=True)
class Segment:
    """One bar: a phase, its start (ms since the request started) and its duration (ms)."""

    phase: str
    start_ms: float
    ms: float


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One request's bars: the client's phases and the server-reported ones, with notes for the hover."""

    label: str  #: e.g. ``"#2"`` or ``"step 0 · #17 (TTFT p95)"``
    client: tuple[Segment, ...]
    server: tuple[Segment, ...] = ()
    facts: str = ""  #: connection and outcome facts shown on hover
    error: str | None = None  #: the error, when the request failed
    error_at_ms: float | None = None
    retried: str | None = None  #: the first attempt's error, when the request was sent again on a new connection
    extra: dict[str, float] = field(default_factory=dict)  #: TTFT, E2E … (ms) for the hover


def _server_segments(measures: dict[str, float], anchor_ms: float) -> tuple[Segment, ...]:
    segments: list[Segment] = []
    at = anchor_ms
    for name in SERVER_SEQUENCE:
        ms = measures.get(name)
        if ms is None or ms != ms:  # NaN: not reported
            continue
        segments.append(Segment(f"server {name}", at, ms))
        at += ms
    if not segments:
        for name in SERVER_OVERALL:
            ms = measures.get(name)
            if ms is not None and ms == ms:
                segments.append(Segment(f"server {name}", anchor_ms, ms))
                break
    return tuple(segments)


def row_from_timeline(t: Timeline, label: str) -> WaterfallRow:
    """The bars of one recorded request."""
    client = tuple(
        Segment(s.name, s.start_ns / NS_PER_MS, s.duration_ns / NS_PER_MS)
        for s in phase_spans(t)
        if s.start_ns is not None and s.duration_ns is not None
    )
    measures: dict[str, float] = {}
    for m in t.server:
        measures.setdefault(m.name, m.ms)
    anchor = t.send_end_ns if t.send_end_ns is not None else t.started_ns
    info = t.connection
    facts = []
    if info is not None:
        facts.append(f"{'reused' if info.reused else 'new'} connection #{info.connection_id}")
        facts += [str(v) for v in (info.http_version, info.tls_version) if v]
    if t.status is not None:
        facts.append(f"HTTP {t.status}")
    extra = {}
    for name, start, end in (("TTFT", t.started_ns, t.first_token_ns), ("E2E", t.started_ns, t.ended_ns)):
        if end is not None:
            extra[name] = (end - start) / NS_PER_MS
    return WaterfallRow(
        label=label,
        client=client,
        server=_server_segments(measures, (anchor - t.started_ns) / NS_PER_MS),
        facts=", ".join(facts),
        error=None if t.error is None else f"{t.error.phase}: {t.error.message}",
        error_at_ms=None if t.error is None else (t.error.at_ns - t.started_ns) / NS_PER_MS,
        retried=None if t.stale_retry_error is None else t.stale_retry_error.message,
        extra=extra,
    )


def _f(row: dict[str, Any], name: str) -> float | None:
    value = row.get(name)
    if value is None:
        return None
    value = float(value)
    return None if value != value else value


def _retry_segments(row: dict[str, Any], retry_ms: float) -> list[Segment]:
    """A retried request's earlier attempts (``retry``) and the waits after each (``backoff``), from its
    ``retried`` list; one ``retry`` bar for the whole ``retry_ms`` when the row does not list them."""
    start = _f(row, "started_at_ms")
    attempts = row.get("retried") or []
    if start is None or not attempts:
        return [Segment("retry", 0.0, retry_ms)]
    out: list[Segment] = []
    for a in attempts:
        began, ended, wait = _f(a, "started_at_ms"), _f(a, "ended_at_ms"), _f(a, "wait_ms")
        if began is None or ended is None:
            continue
        out.append(Segment("retry", began - start, ended - began))
        if wait is not None:
            out.append(Segment("backoff", ended - start, wait))
    return out or [Segment("retry", 0.0, retry_ms)]


def row_from_request(row: dict[str, Any], label: str) -> WaterfallRow:
    """The bars of one ``requests.parquet`` row: a retried request's earlier attempts (``retry``) and the waits after
    them (``backoff``) from 0, the last attempt's setup phases end to end after them, then send, wait, first token
    and stream placed back from the TTFB, TTFT and E2E marks (which run from the first attempt)."""
    client: list[Segment] = []
    at = 0.0
    retry = _f(row, "retry_ms")
    if retry is not None and retry > 0.0:
        client += _retry_segments(row, retry)
        at = retry
    for name in ("pool", "dns", "connect", "tls"):
        ms = _f(row, f"{name}_ms")
        if ms is not None and (name != "pool" or ms >= 1.0):  # a pool "wait" under 1 ms is the client's own work
            client.append(Segment(name, at, ms))
        if ms is not None:
            at += ms
    ttfb, ttft, e2e = _f(row, "ttfb_ms"), _f(row, "ttft_ms"), _f(row, "e2e_ms")
    wait, send = _f(row, "wait_ms"), _f(row, "send_ms")
    send_end = None
    if ttfb is not None and wait is not None:
        send_end = ttfb - wait
        if send is not None:
            client.append(Segment("send", send_end - send, send))
        client.append(Segment("wait", send_end, wait))
        if ttft is not None:
            client.append(Segment("first token", ttfb, ttft - ttfb))
    if ttft is not None and e2e is not None:
        client.append(Segment("stream", ttft, e2e - ttft))
    measures = {p: v for p in (*SERVER_SEQUENCE, *SERVER_OVERALL) if (v := _f(row, f"server_{p}_ms")) is not None}
    facts = []
    if row.get("connection_id") is not None:
        facts.append(f"{'reused' if row.get('reused') else 'new'} connection #{row['connection_id']}")
    if row.get("http_version"):
        facts.append(str(row["http_version"]))
    if row.get("status") is not None:
        facts.append(f"HTTP {row['status']}")
    attempts = row.get("attempts")
    if attempts is not None and int(attempts) > 1:
        facts.append(f"{int(attempts)} attempts")
    error = None
    if not row.get("ok", True):
        error = f"{row.get('error_phase')}: {row.get('error_kind')} {row.get('error_message') or ''}".strip()
    extra = {name: v for name, key in (("TTFT", "ttft_ms"), ("E2E", "e2e_ms")) if (v := _f(row, key)) is not None}
    return WaterfallRow(
        label=label,
        client=tuple(client),
        server=_server_segments(measures, send_end if send_end is not None else at),
        facts=", ".join(facts),
        error=error,
        error_at_ms=None
        if error is None
        else e2e
        if e2e is not None
        else max((c.start_ms + c.ms for c in client), default=0.0),
        extra=extra,
    )


def sample_requests(table: pa.Table, limit: int) -> list[tuple[int, str]]:
    """Indices of up to ``limit`` rows of a requests table worth drawing, with why each was picked: requests at
    evenly spaced TTFT ranks (fastest, median, slowest …) of the successful ones, and the first failures."""
    ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    ttft = np.asarray(table.column("ttft_ms").to_numpy(zero_copy_only=False), dtype=np.float64)
    good = np.flatnonzero(ok & ~np.isnan(ttft))
    failed = np.flatnonzero(~ok)[: max(1, limit // 6)]
    picks: list[tuple[int, str]] = []
    n_good = limit - min(len(failed), limit // 6)
    if good.size:
        order = good[np.argsort(ttft[good], kind="stable")]
        ranks = np.unique(np.round(np.linspace(0, order.size - 1, min(n_good, order.size))).astype(int))
        for r in ranks:
            share = r / max(1, order.size - 1)
            picks.append((int(order[r]), f"TTFT p{share * 100:.0f}"))
    picks += [(int(i), "failed") for i in failed]
    return picks


def text_color(background: str) -> str:
    """Dark text on a light bar, white on a dark one (``#rrggbb`` backgrounds; relative luminance, ITU-R BT.709)."""
    r, g, b = (int(background[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "#1f2328" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "#ffffff"


def waterfall_figure(rows: Sequence[WaterfallRow], title: str) -> Any:
    """The rows as one chart: a bar row per request (first at the top) and a server row under each that has one."""
    factors: list[str] = []
    bars: dict[str, list[Any]] = {k: [] for k in ("y", "left", "right", "phase", "start", "ms", "color", "req", "info")}
    for row in rows:
        client_key = f"{row.label}"
        factors.append(client_key)
        info = row.facts + "".join(f", {k} {v:.1f} ms" for k, v in row.extra.items())
        if row.retried:
            info += f"; sent again on a new connection after: {row.retried}"
        if row.error:
            info += f"; failed: {row.error}"
        for key, segments in ((client_key, row.client), (f"{row.label} · server", row.server)):
            if not segments:
                continue
            if key not in factors:
                factors.append(key)
            for s in segments:
                bars["y"].append(key)
                bars["left"].append(s.start_ms)
                bars["right"].append(s.start_ms + max(s.ms, 0.0))
                bars["phase"].append(s.phase)
                bars["start"].append(round(s.start_ms, 3))
                bars["ms"].append(round(s.ms, 3))
                bars["color"].append(phase_color(s.phase))
                bars["req"].append(row.label)
                bars["info"].append(info)
    span = max(bars["right"], default=1.0) or 1.0
    bars["text"] = [
        f"{p.removeprefix('server ')} {m:.1f}" if (m / span) >= LABEL_MIN_SHARE else ""
        for p, m in zip(bars["phase"], bars["ms"], strict=True)
    ]
    bars["mid"] = [(a + b) / 2 for a, b in zip(bars["left"], bars["right"], strict=True)]
    bars["ink"] = [text_color(c) for c in bars["color"]]
    bars["height"] = [0.5 if p.startswith("server ") else 0.8 for p in bars["phase"]]
    numeric = ("left", "right", "start", "ms", "mid", "height")
    source = ColumnDataSource({k: np.asarray(v, dtype=np.float64) if k in numeric else v for k, v in bars.items()})
    fig = new_figure(
        title,
        height=80 + ROW_PX * len(factors),
        y_range=FactorRange(factors=list(reversed(factors))),
        x_axis_label="ms since the request started",
    )
    # every other request on a light band, so a request's client row and server row read as one
    banded = [
        key for i, row in enumerate(rows) if i % 2 for key in (row.label, f"{row.label} · server") if key in factors
    ]
    if banded:
        fig.hbar(y=banded, left=0, right=span * 1.02, height=1.0, color="#f3f4f6", line_color=None, level="underlay")
    renderer = fig.hbar(
        y="y", left="left", right="right", height="height", color="color", line_color="white", source=source
    )
    fig.add_layout(
        LabelSet(
            x="mid",
            y="y",
            text="text",
            source=source,
            text_align="center",
            text_baseline="middle",
            text_font_size="10px",
            text_color="ink",
        )
    )
    fig.add_tools(
        HoverTool(
            renderers=[renderer],
            tooltips=[
                ("request", "@req"),
                ("phase", "@phase"),
                ("starts at", "@start{0.000} ms"),
                ("takes", "@ms{0.000} ms"),
                ("", "@info"),
            ],
        )
    )
    marks: dict[str, list[Any]] = {"x": [], "y": [], "what": []}
    for row in rows:
        if row.retried:
            marks["x"].append(0.0)
            marks["y"].append(row.label)
            marks["what"].append(f"stale connection, sent again: {row.retried}")
        if row.error and row.error_at_ms is not None:
            marks["x"].append(row.error_at_ms)
            marks["y"].append(row.label)
            marks["what"].append(f"failed: {row.error}")
    if marks["x"]:
        mark_renderer = fig.scatter(
            x="x", y="y", source=ColumnDataSource(marks), marker="x", size=14, line_width=3, color="#cf222e"
        )
        fig.add_tools(HoverTool(renderers=[mark_renderer], tooltips=[("", "@what")]))
    # one legend entry per phase present, in request order
    seen = list(dict.fromkeys(bars["phase"]))
    items = [LegendItem(label=p, renderers=[renderer], index=bars["phase"].index(p)) for p in seen]
    fig.add_layout(
        Legend(items=items, location="top_left", orientation="vertical", label_text_font_size="11px"), "right"
    )
    fig.ygrid.grid_line_color = None
    fig.x_range.start = 0
    return fig
