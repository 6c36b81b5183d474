"""The waterfall and the table, rendered to text: rows, values, facts, errors."""

from __future__ import annotations

from rich.console import Console

from latscope.report import phase_spans, requests_table, waterfall
from latscope.timeline import (
    ConnectionInfo,
    EventKind,
    Phase,
    Read,
    RequestError,
    ServerMeasure,
    StreamEvent,
    TcpInfo,
    Timeline,
)

MS = 1_000_000


def _render(renderable: object, width: int = 120) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def _timeline(*, reused: bool = False) -> Timeline:
    t = Timeline(url="https://api.example/v1/chat/completions", model="m1", started_ns=0)
    if not reused:
        t.dns_start_ns, t.dns_end_ns = 0, 2 * MS
        t.connect_start_ns, t.connect_end_ns = 2 * MS, 5 * MS
        t.tls_start_ns, t.tls_end_ns = 5 * MS, 12 * MS
    t.connection_ready_ns = 12 * MS if not reused else 0
    base = t.connection_ready_ns
    t.send_start_ns, t.headers_sent_ns, t.send_end_ns = base, base, base + 1 * MS
    t.first_byte_ns = base + 101 * MS
    t.headers_received_ns = t.first_byte_ns
    t.status = 200
    times = [t.first_byte_ns + i * 10 * MS for i in range(1, 6)]
    t.reads = [Read(at, 100) for at in [t.first_byte_ns, *times]]
    t.events = [StreamEvent(t.first_byte_ns, 0, EventKind.ROLE, 0, 0, None)]
    t.events += [StreamEvent(at, i + 1, EventKind.CONTENT, 3, 1, None) for i, at in enumerate(times)]
    t.first_token_ns, t.last_token_ns = times[0], times[-1]
    t.ended_ns = times[-1] + 1 * MS
    tcp = TcpInfo(rtt_us=1500, rttvar_us=200, min_rtt_us=1200, total_retrans=0, snd_cwnd=10, ato_us=40000)
    t.connection = ConnectionInfo(
        connection_id=7,
        reused=reused,
        requests_before=2 if reused else 0,
        remote_address="203.0.113.5",
        remote_port=443,
        http_version="HTTP/2",
        alpn="h2",
        tls_version="TLSv1.3",
        tls_session_resumed=False,
        tcp_info_at_end=tcp,
    )
    return t


def test_the_waterfall_has_one_row_per_phase_with_ms_values() -> None:
    text = _render(waterfall(_timeline()))
    for row, value in (("dns", "2.00 ms"), ("connect", "3.00 ms"), ("tls", "7.00 ms"), ("send", "1.00 ms")):
        line = next(line for line in text.splitlines() if f" {row} " in line)
        assert value in line and "█" in line
    assert "wait" in text and "100.00 ms" in text
    assert "first token" in text and "stream" in text
    assert "HTTP 200" in text and "e2e 164.0 ms" in text


def test_bars_are_placed_in_request_order() -> None:
    lines = _render(waterfall(_timeline())).splitlines()

    def bar_start(name: str) -> int:
        line = next(line for line in lines if f" {name} " in line)
        return line.index("█")

    order = [bar_start(name) for name in ("dns", "connect", "tls", "wait", "stream")]
    assert order == sorted(order)


def test_connection_facts_and_cadence_are_shown() -> None:
    text = _render(waterfall(_timeline()))
    assert "new connection #7" in text
    for fact in ("HTTP/2", "ALPN h2", "TLSv1.3 full handshake", "203.0.113.5:443", "rtt 1.50 ms (min 1.20)"):
        assert fact in text
    assert "5 tokens" in text and "TPOT 10.00 ms" in text
    assert "ITL p50 10.00 / p95 10.00 / max 10.00 ms" in text
    assert "6 reads, 6 events" in text


def test_a_reused_connection_shows_no_setup_bars() -> None:
    t = _timeline(reused=True)
    text = _render(waterfall(t))
    assert "reused connection #7 (2 before)" in text
    dns_line = next(line for line in text.splitlines() if " dns " in line)
    assert "reused" in dns_line and "█" not in dns_line
    assert [s.ms for s in phase_spans(t)][:3] == [None, None, None]


def test_server_reported_timings_are_listed() -> None:
    t = _timeline()
    t.server.append(ServerMeasure("queue", 12.5, "header:server-timing:queue"))
    t.server_fields["timings"] = {"prompt_ms": 31.25, "predicted_n": 5}
    text = _render(waterfall(t))
    assert "server reported" in text
    assert "queue" in text and "12.50 ms" in text and "header:server-timing:queue" in text
    assert "prompt_ms" in text and "31.25" in text and "predicted_n" in text


def test_the_error_is_shown_with_its_phase() -> None:
    t = Timeline(url="https://x/v1/chat/completions", started_ns=0)
    t.connect_start_ns, t.connect_end_ns = 0, 3 * MS
    t.tls_start_ns, t.tls_end_ns = 3 * MS, 4 * MS
    t.error = RequestError(Phase.TLS, "cert-verify", "TLS handshake failed: certificate verify failed", 4 * MS)
    t.ended_ns = 4 * MS
    text = _render(waterfall(t))
    assert "✗ failed in tls: TLS handshake failed: certificate verify failed" in text
    assert "tls" in text and "1.00 ms" in text


def test_warnings_are_listed() -> None:
    t = _timeline()
    t.warnings.append("stream ended without [DONE] after 6 events")
    assert "! stream ended without [DONE] after 6 events" in _render(waterfall(t))


def test_the_table_has_one_row_per_request() -> None:
    failed = Timeline(url="http://x/v1", started_ns=0, ended_ns=MS)
    failed.error = RequestError(Phase.CONNECT, "refused", "TCP connect to x:80 failed: connection refused", MS)
    text = _render(requests_table([_timeline(), _timeline(reused=True), failed]), width=160)
    lines = [line for line in text.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(lines) == 3
    assert "new #7 h2" in lines[0] and "2.0" in lines[0] and "164.0" in lines[0]
    assert "reused #7 h2" in lines[1]
    assert "connect: TCP connect to x:80 failed: connection refused" in lines[2]
    assert "times in ms" in text


def test_narrow_consoles_still_render() -> None:
    text = _render(waterfall(_timeline()), width=60)
    assert "dns" in text and "stream" in text
