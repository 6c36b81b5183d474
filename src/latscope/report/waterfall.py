"""A request's timeline drawn as a waterfall, plus a compact table for several requests (rich renderables).

One bar row per phase (dns, connect, tls, send, wait, first token, stream), each bar placed at its start and scaled
to the request's end-to-end time, with its duration in milliseconds; under it the connection facts, the token
cadence, the TTFT split into client-side, server-side and unattributed terms (when the caller computed one), what
the server reported about itself, and the error when the request failed.

The TTFT split is computed in ``signals`` (``latscope.signals.join.ttft_split``); callers pass its terms as
:class:`TtftSegment` values, each with its side.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from latscope.report.format import TRACE, TRACE_FINE, fmt_ms
from latscope.signals.join import TtftSide
from latscope.timeline import metrics
from latscope.timeline.model import ConnectionInfo, Timeline
from latscope.timeline.percentile import percentile
from latscope.units import NS_PER_MS

#: bar colours per phase: setup phases cool, the server's time warm, streaming green
PHASE_STYLES = {
    "pool": "grey50",
    "dns": "cyan",
    "connect": "blue",
    "tls": "magenta",
    "send": "bright_white",
    "wait": "yellow",
    "first token": "dark_orange",
    "stream": "green",
}

#: TTFT split colours and headings per side: the client's own time cool like the setup phases, the server's warm
#: like the wait, the unattributed remainder grey
TTFT_SIDE_STYLES: dict[str, str] = {"client": "blue", "server": "dark_orange", "unattributed": "grey62"}
TTFT_SIDE_LABELS: dict[str, str] = {
    "client": "client-side",
    "server": "server-side",
    "unattributed": "network + unreported",
}
#: the same, short, for the rows under the headline
TTFT_SIDE_SHORT: dict[str, str] = {"client": "client", "server": "server", "unattributed": "rest"}

#: two server measures of one phase that differ by less than this (ms) are the same value reported twice (the lab's
#: Server-Timing and its body both round to the microsecond)
SAME_MEASURE_MS = 0.0005

#: narrowest and widest bar column, in characters
MIN_BAR_WIDTH = 20
MAX_BAR_WIDTH = 72

#: below this (ms) the "pool" remainder is the client's own per-request work (building headers, wrapping the socket,
#: ~0.1-0.3 ms), not a wait for a connection, so no row is drawn for it
POOL_ROW_MIN_MS = 1.0


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One waterfall row: a phase, where it starts relative to the request's start, and how long it took (ns)."""

    name: str
    start_ns: int | None  #: offset from ``started_ns``; None when the phase did not happen
    duration_ns: int | None

    @property
    def ms(self) -> float | None:
        """The duration in milliseconds, or None."""
        return None if self.duration_ns is None else self.duration_ns / NS_PER_MS


@dataclass(frozen=True, slots=True)
class TtftSegment:
    """One term of a TTFT split, ready to draw.

    ``ns`` is the term's duration in nanoseconds (the terms of one split add up to the TTFT exactly; the last one is
    negative when the server reports more time than the client saw). ``side`` says who accounts for it:
    ``"client"`` (the client's marks: connection setup, sending), ``"server"`` (a phase the server reported) or
    ``"unattributed"`` (the network round trip, and time nobody reported). ``source`` is where it came from
    (``client:started→connection_ready``, ``header:server-timing:queue``, ``tcp_info:min_rtt_us``, ``remainder``).
    """

    name: str
    ns: int
    source: str
    side: TtftSide

    @property
    def ms(self) -> float:
        """The duration in milliseconds."""
        return self.ns / NS_PER_MS


def _span(name: str, t: Timeline, start: int | None, end: int | None) -> PhaseSpan:
    if start is None or end is None:
        return PhaseSpan(name, None, None)
    return PhaseSpan(name, start - t.started_ns, max(0, end - start))


def phase_spans(t: Timeline) -> list[PhaseSpan]:
    """The waterfall rows of ``t``, in request order (a pool row only when the request waited for a connection)."""
    setup_start = t.dns_start_ns or t.connect_start_ns or t.connection_ready_ns
    spans: list[PhaseSpan] = []
    pool = metrics.pool_ms(t)
    if pool is not None and pool >= POOL_ROW_MIN_MS:
        spans.append(_span("pool", t, t.started_ns, setup_start))
    spans += [
        _span("dns", t, t.dns_start_ns, t.dns_end_ns),
        _span("connect", t, t.connect_start_ns, t.connect_end_ns),
        _span("tls", t, t.tls_start_ns, t.tls_end_ns),
        _span("send", t, t.send_start_ns, t.send_end_ns),
        _span("wait", t, t.send_end_ns, t.first_byte_ns),
        _span("first token", t, t.first_byte_ns, t.first_token_ns),
        _span("stream", t, t.first_token_ns, t.ended_ns),
    ]
    return spans


def _end_ns(t: Timeline) -> int:
    candidates = [t.ended_ns, t.last_token_ns, t.first_byte_ns, t.send_end_ns, t.connection_ready_ns]
    if t.error is not None:
        candidates.append(t.error.at_ns)
    known = [c for c in candidates if c is not None]
    return max(known) if known else t.started_ns


def _bar(span: PhaseSpan, total_ns: int, width: int, *, style: str | None = None) -> Text:
    bar = Text(no_wrap=True, overflow="crop")
    if span.start_ns is None or span.duration_ns is None or total_ns <= 0:
        return bar
    start = min(width - 1, int(span.start_ns / total_ns * width))
    length = max(1, round(span.duration_ns / total_ns * width))
    length = min(length, width - start)
    bar.append(" " * start)
    bar.append("█" * length, style=style or PHASE_STYLES.get(span.name, "white"))
    return bar


def connection_facts(info: ConnectionInfo | None) -> Text:
    """One line: new or reused connection and its id, HTTP version, ALPN, TLS version and resumption, remote
    address, TCP round-trip time."""
    text = Text()
    if info is None:
        return text.append("no connection", style="dim")
    if info.reused:
        text.append(f"reused connection #{info.connection_id}", style="green")
        text.append(f" ({info.requests_before} before)", style="dim")
    else:
        text.append(f"new connection #{info.connection_id}", style="yellow")
    parts: list[str] = []
    if info.http_version:
        parts.append(info.http_version)
    if info.alpn:
        parts.append(f"ALPN {info.alpn}")
    if info.tls_version:
        resumed = {True: "resumed", False: "full handshake", None: ""}[info.tls_session_resumed]
        parts.append(f"{info.tls_version} {resumed}".strip())
    if info.remote_address:
        host = f"[{info.remote_address}]" if ":" in info.remote_address else info.remote_address
        parts.append(f"{host}:{info.remote_port}")
    tcp = info.tcp_info_at_end or info.tcp_info_at_headers
    if tcp is not None:
        rtt = f"rtt {tcp.rtt_us / 1000:.2f} ms"
        if tcp.min_rtt_us is not None:
            rtt += f" (min {tcp.min_rtt_us / 1000:.2f})"
        if tcp.total_retrans:
            rtt += f", {tcp.total_retrans} retransmits"
        parts.append(rtt)
    if info.quickack:
        parts.append("quickack")
    for part in parts:
        text.append(" · ", style="dim")
        text.append(part)
    return text


def token_cadence(t: Timeline) -> Text:
    """One line: tokens, TTFT (and to the first visible text when that came later: reasoning or a tool call came
    first), TPOT, ITL p50/p95/max, reads and events per read."""
    text = Text()
    tokens = metrics.output_tokens(t)
    text.append(f"{tokens} tokens", style="bold")
    text.append(f" · TTFT {fmt_ms(metrics.ttft_ms(t), TRACE)}")
    if t.first_text_ns is not None and t.first_text_ns != t.first_token_ns:
        text.append(f" (first text {fmt_ms(metrics.ttft_text_ms(t), TRACE)})")
    text.append(f" · TPOT {fmt_ms(metrics.tpot_ms(t), TRACE_FINE)}")
    gaps = metrics.itl_ms(t)
    if gaps:
        p50, p95 = percentile(gaps, 50, method="nearest"), percentile(gaps, 95, method="nearest")
        text.append(f" · ITL p50 {p50:.2f} / p95 {p95:.2f} / max {max(gaps):.2f} ms")
    per_read = metrics.events_per_read(t)
    text.append(f" · {len(t.reads)} reads, {len(t.events)} events")
    if per_read:
        mean = statistics.fmean(per_read)
        text.append(f" · events/read mean {mean:.1f} max {max(per_read)}")
    delays = metrics.read_delays_ms(t)
    if delays:  # kernel receive stamps: the client's own delay on each read, measured
        p50, p99 = percentile(delays, 50), percentile(delays, 99)
        text.append(f" · kernel stamps, client read delay p50 {p50:.3f} / p99 {p99:.3f} ms")
    return text


def ttft_breakdown(segments: Sequence[TtftSegment], *, width: int = MAX_BAR_WIDTH) -> RenderableType | None:
    """The TTFT split: a headline ``TTFT = client-side + server-side + network + unreported`` (ms), one bar of
    ``width`` characters shared between the sides in proportion, then one row per term (side, term, ms, source).
    None without terms."""
    if not segments:
        return None
    ttft_ns = sum(segment.ns for segment in segments)
    sides: dict[str, int] = {}
    for segment in segments:
        sides[segment.side] = sides.get(segment.side, 0) + segment.ns
    head = Text("TTFT split ", style="bold")
    head.append(fmt_ms(ttft_ns / NS_PER_MS, TRACE_FINE), style="bold")
    for index, (side, ns) in enumerate(sides.items()):
        head.append(" = " if index == 0 else " + ")
        head.append(f"{TTFT_SIDE_LABELS.get(side, side)} {fmt_ms(ns / NS_PER_MS, TRACE_FINE)}", style=_side(side))
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=False)
    table.add_column("side", no_wrap=True, min_width=6)
    table.add_column("term", no_wrap=True)
    table.add_column("ms", justify="right", no_wrap=True, min_width=9)
    table.add_column("source", style="dim", overflow="fold")
    previous_side: str | None = None
    for segment in segments:
        label = Text(TTFT_SIDE_SHORT.get(segment.side, segment.side) if segment.side != previous_side else "")
        label.stylize(_side(segment.side))
        previous_side = segment.side
        table.add_row(label, segment.name, fmt_ms(segment.ms, TRACE_FINE), segment.source)
    parts: list[RenderableType] = [head]
    if ttft_ns > 0:
        parts.append(_stacked_bar(sides, ttft_ns, width))
    parts.append(table)
    excess = -min(0, *(segment.ns for segment in segments))
    if excess:
        parts.append(
            Text(
                f"! the server reports {fmt_ms(excess / NS_PER_MS, TRACE_FINE)} more than the client saw before the "
                "first token (overlapping phases, or clocks that disagree)",
                style="yellow",
            )
        )
    return Group(*parts)


def _stacked_bar(sides: dict[str, int], total_ns: int, width: int) -> Text:
    """One bar of ``width`` characters split between the sides in proportion; a side with any time gets at least one
    character (taken from the widest), so a 0.2 ms client side next to a 100 ms prefill stays visible."""
    lengths = {side: max(1, round(ns / total_ns * width)) if ns > 0 else 0 for side, ns in sides.items()}
    widest = max(lengths, key=lambda side: lengths[side])
    lengths[widest] = max(1, lengths[widest] + width - sum(lengths.values()))
    bar = Text(no_wrap=True, overflow="crop")
    for side, length in lengths.items():
        bar.append("█" * length, style=_side(side))
    return bar


def _side(side: str) -> str:
    return TTFT_SIDE_STYLES.get(side, "white")


def server_reported(t: Timeline) -> RenderableType | None:
    """A small table of what the server said about this request, or None.

    One row per reported value: a phase reported with the same value by several signals (the lab's Server-Timing,
    its ``latscope`` object and its llama.cpp ``timings``) is one row listing every source. Raw llama.cpp
    ``timings`` fields that are not already a row (token counts, rates) follow.
    """
    timings = t.server_fields.get("timings")
    if not t.server and not isinstance(timings, dict):
        return None
    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(style="dim", overflow="fold")
    rows: list[tuple[str, float, list[str]]] = []
    for measure in t.server:
        same = next(
            (row for row in rows if row[0] == measure.name and abs(row[1] - measure.ms) < SAME_MEASURE_MS), None
        )
        if same is None:
            rows.append((measure.name, measure.ms, [measure.source]))
        else:
            same[2].append(measure.source)
    for name, ms, sources in rows:
        table.add_row(name, fmt_ms(ms, TRACE_FINE), ", ".join(sources))
    shown_sources = {measure.source for measure in t.server}
    if isinstance(timings, dict):
        for key, value in timings.items():
            if f"body:timings.{key}" in shown_sources:
                continue
            shown = f"{value:.2f}" if isinstance(value, float) else str(value)
            table.add_row(key, shown, "body:timings")
    return Group(Text("server reported", style="bold"), table)


class Waterfall:
    """A rich renderable: the waterfall panel of one timeline. ``title`` defaults to method, URL and model;
    ``ttft_split`` adds the TTFT split section (see :func:`ttft_breakdown`)."""

    def __init__(
        self, timeline: Timeline, *, title: str | None = None, ttft_split: Sequence[TtftSegment] | None = None
    ) -> None:
        self.timeline = timeline
        self.title = title
        self.ttft_split = tuple(ttft_split) if ttft_split is not None else ()

    def _title(self) -> Text:
        t = self.timeline
        if self.title is not None:
            return Text(self.title)
        title = Text(f"{t.method} {t.url}")
        if t.model:
            title.append(f" · {t.model}", style="dim")
        return title

    def _subtitle(self) -> Text:
        t = self.timeline
        text = Text()
        if t.status is not None:
            text.append(f"HTTP {t.status}", style="green" if t.status < 400 else "red")
            text.append(" · ")
        text.append(f"e2e {fmt_ms(metrics.e2e_ms(self.timeline), TRACE)}")
        return text

    def _rows(self, width: int) -> Table:
        t = self.timeline
        total = _end_ns(t) - t.started_ns
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, expand=False)
        table.add_column("phase", no_wrap=True, min_width=11)
        table.add_column("ms", justify="right", no_wrap=True, min_width=9)
        table.add_column("bar", no_wrap=True, width=width)
        reused = t.connection is not None and t.connection.reused
        for span in phase_spans(t):
            if span.ms is None:
                note = "reused" if reused and span.name in ("dns", "connect", "tls") else "—"
                table.add_row(Text(span.name, style="dim"), Text(note, style="dim"), Text())
                continue
            table.add_row(
                Text(span.name, style=PHASE_STYLES.get(span.name, "")),
                fmt_ms(span.ms, TRACE_FINE),
                _bar(span, total, width),
            )
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        t = self.timeline
        # label column + ms column + paddings + panel borders take about 28 characters
        width = max(MIN_BAR_WIDTH, min(MAX_BAR_WIDTH, options.max_width - 28))
        parts: list[RenderableType] = [self._rows(width), Text(), connection_facts(t.connection)]
        if t.events or t.error is None:
            parts.append(token_cadence(t))
        split = ttft_breakdown(self.ttft_split, width=width)
        if split is not None:
            parts += [Text(), split]
        server = server_reported(t)
        if server is not None:
            parts += [Text(), server]
        if t.error is not None:
            failed = Text("✗ failed in ", style="bold red")
            failed.append(str(t.error.phase), style="bold red")
            failed.append(f": {t.error.message}", style="red")
            parts += [Text(), failed]
        for warning in t.warnings:
            parts.append(Text(f"! {warning}", style="yellow"))
        yield Panel(Group(*parts), title=self._title(), subtitle=self._subtitle(), title_align="left", expand=False)


def waterfall(
    timeline: Timeline, *, title: str | None = None, ttft_split: Sequence[TtftSegment] | None = None
) -> Waterfall:
    """The waterfall renderable of one timeline, with the TTFT split section when ``ttft_split`` is given."""
    return Waterfall(timeline, title=title, ttft_split=ttft_split)


def requests_table(timelines: Iterable[Timeline], *, title: str | None = None) -> Table:
    """A compact table, one row per request: connection, phases, TTFT, TPOT and e2e (all in ms), tokens, error."""
    # a light box (no vertical rules) so the 13 columns fit an 80-column terminal without squeezing any to nothing
    table = Table(
        title=title,
        title_justify="left",
        header_style="bold",
        caption="times in ms",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("status", justify="right", no_wrap=True)
    table.add_column("connection", overflow="fold", min_width=9)
    for name in ("dns", "tcp", "tls", "send", "wait", "ttft", "tpot", "e2e"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    timelines = list(timelines)
    # the error column only when a request failed: on an 80-column terminal an empty column squeezes the others
    with_errors = any(t.error is not None for t in timelines)
    if with_errors:
        table.add_column("error", overflow="fold")
    for index, t in enumerate(timelines, start=1):
        info = t.connection
        if info is None:
            conn = Text("—", style="dim")
        elif info.reused:
            conn = Text(f"reused #{info.connection_id}", style="green")
        else:
            conn = Text(f"new #{info.connection_id}", style="yellow")
            if info.tls_session_resumed:
                conn.append(" resumed")
        if info is not None and info.http_version:
            conn.append(f" {info.http_version.replace('HTTP/', 'h')}", style="dim")
        cells = [
            metrics.dns_ms(t),
            metrics.connect_ms(t),
            metrics.tls_ms(t),
            metrics.send_ms(t),
            metrics.wait_ms(t),
            metrics.ttft_ms(t),
            metrics.tpot_ms(t),
            metrics.e2e_ms(t),
        ]
        error = Text()
        if t.error is not None:
            error = Text(f"{t.error.phase}: {t.error.message}", style="red")
        status = Text(str(t.status) if t.status is not None else "—", style="red" if (t.status or 0) >= 400 else "")
        table.add_row(
            str(index),
            status,
            conn,
            *("—" if v is None else f"{v:.1f}" for v in cells),
            str(metrics.output_tokens(t)),
            *([error] if with_errors else []),
        )
    return table
