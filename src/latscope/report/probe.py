"""A probe drawn for the terminal (rich), from its :class:`~latscope.probe.ProbeResult`.

In reading order: the target; each request's waterfall with its TTFT split; a table of the requests (several);
with ``--browser`` how many waited for a connection; with ``--http3 --compare`` the TCP+TLS requests and both
handshakes; what the connection pool did; the server's Prometheus metrics over the probe's window.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from latscope.dialects import get_dialect
from latscope.probe import ProbeResult, ttft_side
from latscope.report.format import FIXED_1, fmt_ms
from latscope.report.server import server_window
from latscope.report.waterfall import POOL_ROW_MIN_MS, TtftSegment, requests_table, waterfall
from latscope.signals.altsvc import describe_h3
from latscope.signals.join import TtftSplit
from latscope.timeline.metrics import connect_ms, e2e_ms, pool_ms, tls_ms, ttft_ms
from latscope.timeline.model import Timeline
from latscope.wire.pool import BROWSER_CONNECTIONS_PER_HOST


def ttft_segments(split: TtftSplit | None) -> list[TtftSegment] | None:
    """A TTFT split's terms as the waterfall draws them, each with its side (client, server, unattributed)."""
    if split is None:
        return None
    return [TtftSegment(part.name, part.ns, part.source, ttft_side(part.name)) for part in split.parts]


def browser_line(timelines: list[Timeline]) -> Text:
    """How many of a ``--browser`` probe's requests waited for a connection, and how long (ms).

    A request that waited for an HTTP/1.1 connection waited for another request to finish on it: at least half the
    shortest time any request of the batch held its connection (its end-to-end time less its own pool time). Less
    than that, and never less than :data:`~latscope.report.waterfall.POOL_ROW_MIN_MS`, is the client starting a
    dozen requests at once.
    """
    held = [e2e - (pool_ms(t) or 0.0) for t in timelines if (e2e := e2e_ms(t)) is not None]
    floor = max(POOL_ROW_MIN_MS, 0.5 * min(held)) if held else POOL_ROW_MIN_MS
    waits = sorted(w for w in (pool_ms(t) for t in timelines) if w is not None and w >= floor)
    line = Text(
        f"browser pool: {len(timelines)} requests at once, at most {BROWSER_CONNECTIONS_PER_HOST} connections per "
        "host: ",
        style="bold",
    )
    if not waits:
        line.append("none waited for a connection", style="green")
    else:
        middle = waits[len(waits) // 2]
        line.append(
            f"{len(waits)} waited for a connection (median {middle:.1f} ms, longest {waits[-1]:.1f} ms)",
            style="yellow",
        )
    return line


def _first_new(timelines: list[Timeline]) -> Timeline | None:
    """The first request that opened a connection and completed its handshake."""
    return next((t for t in timelines if t.tls_end_ns is not None and t.tls_start_ns is not None), None)


def h3_lines(result: ProbeResult) -> list[Text]:
    """What a probe says about HTTP/3: whether the target announces it (Alt-Svc), and with ``--http3`` the QUIC
    handshake and TTFT beside TCP+TLS's (``--compare``), in ms."""
    lines: list[Text] = []
    advertised = result.h3_advertised()
    if advertised:
        lines.append(Text(f"Alt-Svc: {describe_h3(advertised)}", style="dim"))
    if not result.http3:
        return lines  # no h3 announced is the common case: the JSON's h3_advertised (null) says it
    if advertised is None:
        lines.append(Text("Alt-Svc: no h3 advertised on the TCP responses", style="dim"))
    h3 = _first_new(result.timelines)
    tcp = _first_new(result.tcp_timelines)
    line = Text("HTTP/3: ", style="bold")
    if h3 is None:
        line.append("no QUIC handshake completed", style="red")
        lines.append(line)
        return lines
    line.append(f"QUIC handshake {fmt_ms(tls_ms(h3), FIXED_1)} (TLS 1.3 inside QUIC; connect is the UDP socket)")
    if tcp is not None:
        connect, tls = connect_ms(tcp), tls_ms(tcp)
        both = None if connect is None or tls is None else connect + tls
        line.append(
            f" · TCP+TLS {fmt_ms(both, FIXED_1)} (connect {fmt_ms(connect, FIXED_1)} + TLS {fmt_ms(tls, FIXED_1)})"
        )
    lines.append(line)
    ttft = Text("first request's TTFT: ", style="bold")
    ttft.append(f"HTTP/3 {fmt_ms(ttft_ms(result.timelines[0]), FIXED_1)}")
    if result.tcp_timelines:
        ttft.append(f" · TCP+TLS {fmt_ms(ttft_ms(result.tcp_timelines[0]), FIXED_1)}")
    lines.append(ttft)
    return lines


def _head(result: ProbeResult) -> Text:
    """``latscope probe URL · model M · mode · N requests``."""
    n = len(result.timelines)
    head = Text("latscope probe ", style="bold")
    head.append(result.base_url)
    mode = get_dialect(result.dialect).mode
    head.append(f" · model {result.model} · {mode} · {n} request{'s' if n != 1 else ''}", style="dim")
    return head


def _pool_lines(result: ProbeResult) -> list[Text]:
    """Per origin: connections opened, requests, reuses and TLS session resumptions."""
    over = " over HTTP/3 (QUIC)" if result.http3 else ""
    lines: list[Text] = []
    for origin, stats in result.pool.items():
        line = (
            f"{origin}{over}: {stats.connections_opened} connection(s) opened for {stats.requests} request(s), "
            f"{stats.reuses} reused"
        )
        if stats.tls_sessions_offered:
            line += f"; TLS sessions resumed {stats.tls_sessions_resumed}/{stats.tls_sessions_offered}"
        lines.append(Text(line, style="dim"))
    return lines


def probe_view(result: ProbeResult) -> RenderableType:
    """The whole terminal view of a probe: head, a waterfall per request, the requests table, the browser pool,
    TCP+TLS beside HTTP/3, the connection pool and the server's metrics."""
    n = len(result.timelines)
    parts: list[RenderableType] = [_head(result)]
    for index, (t, split) in enumerate(zip(result.timelines, result.ttft_splits(), strict=True), start=1):
        title = f"request {index}/{n} · {t.method} {t.url}"
        parts.append(waterfall(t, title=title, ttft_split=ttft_segments(split)))
    if n > 1:
        parts.append(requests_table(result.timelines))
    if result.browser:
        parts.append(browser_line(result.timelines))
    if result.tcp_timelines:
        parts.append(Text("TCP+TLS, for comparison:", style="bold"))
        parts.append(requests_table(result.tcp_timelines))
    parts += h3_lines(result)
    parts += _pool_lines(result)
    if result.server_metrics is not None:
        parts.append(server_window(result.server_metrics))
    if result.server_spans is not None:
        parts.append(Text(f"server spans: {result.server_spans}", style="dim"))
    return Group(*parts)
