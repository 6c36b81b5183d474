"""The waterfall's TTFT split section and the condensed server-reported table, rendered to text."""

from __future__ import annotations

import re

from rich.console import Console

from latscope.report.waterfall import TtftSegment, server_reported, ttft_breakdown, waterfall
from latscope.timeline import ServerMeasure, Timeline
from tests.report.test_waterfall import _timeline

MS = 1_000_000

SEGMENTS = [
    TtftSegment("connection", 12 * MS, "client:started→connection_ready", "client"),
    TtftSegment("send", 1 * MS, "client:connection_ready→send_end", "client"),
    TtftSegment("queue", 30 * MS, "header:server-timing:queue", "server"),
    TtftSegment("prefill", 70 * MS, "header:server-timing:prefill", "server"),
    TtftSegment("network", 1_500_000, "tcp_info:min_rtt_us", "unattributed"),
    TtftSegment("other", 8_500_000, "remainder", "unattributed"),
]


def _render(renderable: object, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_headline_adds_the_sides_up_to_the_ttft() -> None:
    text = _render(ttft_breakdown(SEGMENTS))
    assert "TTFT split 123.00 ms = client-side 13.00 ms + server-side 100.00 ms + network + unreported 10.00 ms" in text


def test_one_row_per_term_with_its_side_value_and_source() -> None:
    text = _render(ttft_breakdown(SEGMENTS))
    assert re.search(r"client\s+connection\s+12\.00 ms\s+client:started→connection_ready", text)
    assert re.search(r"^\s+send\s+1\.00 ms", text, flags=re.MULTILINE)  # the side is named once per group
    assert re.search(r"server\s+queue\s+30\.00 ms\s+header:server-timing:queue", text)
    assert re.search(r"rest\s+network\s+1\.50 ms\s+tcp_info:min_rtt_us", text)


def test_the_bar_is_shared_between_the_sides_and_a_small_side_stays_visible() -> None:
    segments = [
        TtftSegment("send", MS // 10, "client:started→send_end", "client"),
        TtftSegment("prefill", 500 * MS, "body:timings.prompt_ms", "server"),
    ]
    bar = next(line for line in _render(ttft_breakdown(segments, width=40)).splitlines() if "█" in line)
    assert bar.count("█") == 40


def test_a_server_reporting_more_than_the_client_saw_is_flagged() -> None:
    segments = [
        TtftSegment("send", 1 * MS, "client:started→send_end", "client"),
        TtftSegment("prefill", 60 * MS, "header:server-timing:prefill", "server"),
        TtftSegment("network_and_other", -11 * MS, "remainder", "unattributed"),
    ]
    text = _render(ttft_breakdown(segments))
    assert "network + unreported -11.00 ms" in text
    assert "! the server reports 11.00 ms more than the client saw before the first token" in text


def test_no_terms_no_section() -> None:
    assert ttft_breakdown([]) is None
    assert "TTFT split" not in _render(waterfall(_timeline()))


def test_the_waterfall_shows_the_split_it_is_given() -> None:
    text = _render(waterfall(_timeline(), ttft_split=SEGMENTS))
    assert "TTFT split 123.00 ms = client-side 13.00 ms" in text
    assert text.index("ITL p50") < text.index("TTFT split") < text.index("HTTP 200")  # after the cadence line


def test_one_value_reported_by_several_signals_is_one_row() -> None:
    t = Timeline(started_ns=0)
    t.server = [
        ServerMeasure("prefill", 40.0, "header:server-timing:prefill"),
        ServerMeasure("prefill", 40.0, "body:timings.prompt_ms"),
        ServerMeasure("prefill", 41.5, "body:latscope.prefill_ms"),
    ]
    t.server_fields["timings"] = {"prompt_ms": 40.0, "prompt_n": 65}
    text = _render(server_reported(t))
    assert re.search(r"prefill\s+40\.00 ms\s+header:server-timing:prefill, body:timings\.prompt_ms", text)
    assert re.search(r"prefill\s+41\.50 ms\s+body:latscope\.prefill_ms", text)  # a different value keeps its row
    assert "prompt_n" in text
    assert not re.search(r"^prompt_ms", text, flags=re.MULTILINE)  # the raw field already shown as a measure
