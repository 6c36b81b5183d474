"""The HTML views' data, without a browser: exact CDF points, thinned streams, picked requests, the page shell."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from latscope.cli import html as cli_html
from latscope.cli.main import cli
from latscope.report.html.cdf import cdf_points
from latscope.report.html.page import Section, render_page
from latscope.report.html.run import run_html
from latscope.report.html.streams import KEEP_LARGEST_GAPS, StreamTrace, thin
from latscope.report.html.waterfall import row_from_request, sample_requests, text_color
from tests.support.synthetic_run import write_synthetic_run


def test_a_cdf_of_many_samples_passes_through_the_exact_percentiles() -> None:
    values = np.random.default_rng(0).lognormal(3, 1, 200_000)
    x, p = cdf_points(values, max_points=600)
    assert x.size <= 601 and p[-1] == 1.0 and x[-1] == values.max()
    for q in (0.5, 0.9, 0.99, 0.999):
        assert np.interp(q, p, x) == pytest.approx(np.quantile(values, q), rel=0.01)


def test_a_small_sample_is_drawn_sample_by_sample() -> None:
    x, p = cdf_points([3.0, 1.0, np.nan, 2.0])
    assert list(x) == [1.0, 2.0, 3.0] and list(p) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_thinning_a_long_stream_keeps_its_stalls_and_coalesced_events() -> None:
    n = 20_000
    gaps = np.full(n, 10.0)
    gaps[0] = np.nan
    stalls = np.array([1234, 15_000])
    gaps[stalls] = 500.0
    coalesced = np.zeros(n, dtype=bool)
    coalesced[[777, 9999]] = True
    trace = StreamTrace("s", np.cumsum(np.nan_to_num(gaps)), np.arange(1.0, n + 1), gaps, coalesced, n)
    thinned = thin(trace, limit=400)
    assert thinned.at_ms.size <= 400 + KEEP_LARGEST_GAPS
    assert np.count_nonzero(thinned.gap_ms == 500.0) == 2 and np.count_nonzero(thinned.coalesced) == 2
    assert thinned.at_ms[0] == trace.at_ms[0] and thinned.at_ms[-1] == trace.at_ms[-1]
    assert thinned.events == n


def test_requests_are_picked_from_the_fastest_to_the_slowest_and_failures_kept() -> None:
    ttft = [50.0, 10.0, 90.0, np.nan, 30.0, 70.0]
    table = pa.table({"ok": [True, True, True, False, True, True], "ttft_ms": ttft})
    picks = dict(sample_requests(table, 6))
    assert picks[1] == "TTFT p0" and picks[2] == "TTFT p100" and picks[3] == "failed"


def test_a_bench_row_is_drawn_in_request_order_with_the_server_phases_from_the_end_of_sending() -> None:
    row = {
        "ok": True,
        "pool_ms": 0.1,
        "dns_ms": 1.0,
        "connect_ms": 2.0,
        "tls_ms": None,
        "send_ms": 0.5,
        "wait_ms": 40.0,
        "ttfb_ms": 43.6,
        "ttft_ms": 45.0,
        "e2e_ms": 100.0,
        "server_queue_ms": 10.0,
        "server_prefill_ms": 25.0,
        "server_decode_ms": 55.0,
    }
    drawn = row_from_request(row, "r")
    phases = [s.phase for s in drawn.client]
    assert phases == ["dns", "connect", "send", "wait", "first token", "stream"]  # a pool "wait" < 1 ms is not one
    starts = {s.phase: s.start_ms for s in drawn.client}
    assert starts["wait"] == pytest.approx(3.6) and starts["stream"] == 45.0
    server = {s.phase: (s.start_ms, s.ms) for s in drawn.server}
    assert server["server queue"] == (pytest.approx(3.6), 10.0)
    assert server["server prefill"][0] == pytest.approx(13.6) and server["server decode"][0] == pytest.approx(38.6)


def test_bar_labels_are_readable_on_light_and_dark_bars() -> None:
    assert text_color("#ffffff") != text_color("#7f2704")


def test_the_page_inlines_bokeh_and_escapes_what_it_shows() -> None:
    page = render_page("t <x>", "s", [Section("v", "<b>title</b>", "how & why", [], "<p>ok</p>")])
    assert "&lt;b&gt;title&lt;/b&gt;" in page and "how &amp; why" in page and "<p>ok</p>" in page
    assert not re.search(r"<script[^>]+src=", page)
    assert "Bokeh" in page  # the library itself is in the page


def test_a_ten_thousand_request_run_is_small_and_quick(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", requests_per_step=5000, concurrency=(1, 8), output_tokens=32)
    import time

    started = time.perf_counter()
    page = run_html(run)
    elapsed = time.perf_counter() - started
    assert len(page.encode()) < 5_000_000
    assert elapsed < 10.0, elapsed


def test_html_without_bokeh_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli_html.importlib.util, "find_spec", lambda name: None)
    run = write_synthetic_run(tmp_path / "run", requests_per_step=20, concurrency=(1,), output_tokens=4)
    result = CliRunner().invoke(cli, ["report", str(run), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "pip install 'latscope[html]'" in result.output
    assert not (tmp_path / "r.html").exists()


def test_a_stale_connection_retry_and_a_failure_are_marked_on_the_waterfall() -> None:
    from latscope.report.html.waterfall import row_from_timeline, waterfall_figure
    from latscope.timeline.model import ErrorKind, Phase, RequestError, ServerMeasure, Timeline

    ms = 1_000_000
    t = Timeline(
        started_ns=0,
        connect_start_ns=3 * ms,
        connect_end_ns=4 * ms,
        connection_ready_ns=4 * ms,
        send_start_ns=4 * ms,
        send_end_ns=5 * ms,
        first_byte_ns=30 * ms,
        first_token_ns=31 * ms,
        ended_ns=80 * ms,
        server=[
            ServerMeasure("queue", 5.0, "header:server-timing:queue"),
            ServerMeasure("prefill", 20.0, "header:server-timing:prefill"),
        ],
    )
    t.stale_retry_error = RequestError(Phase.HEADERS, ErrorKind.CLOSED, "the server closed the connection", 2 * ms)
    row = row_from_timeline(t, "#1")
    assert [s.phase for s in row.client] == ["pool", "connect", "send", "wait", "first token", "stream"]
    assert row.retried == "the server closed the connection"
    assert [(s.phase, s.start_ms) for s in row.server] == [("server queue", 5.0), ("server prefill", 10.0)]
    failed = Timeline(started_ns=0, connect_start_ns=0)
    failed.error = RequestError(Phase.CONNECT, ErrorKind.REFUSED, "connection refused", 1 * ms)
    fig = waterfall_figure([row, row_from_timeline(failed, "#2")], "t")
    marks = [r for r in fig.renderers if "what" in r.data_source.data]
    [source] = [m.data_source.data for m in marks]
    assert any("sent again" in w for w in source["what"]) and any("connection refused" in w for w in source["what"])
