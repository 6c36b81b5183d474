"""The HTML reports in a real browser (headless chromium, networking off): no console error, every chart rendered,
the views in the DOM, a screenshot of each view saved under the test's tmp dir (``screenshots/``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.report.html import diagnosis_html, run_html
from tests.support import browser
from tests.support.stream_server import ServerThread, models_handler, paced_stream
from tests.support.synthetic_run import write_synthetic_run

pytestmark = pytest.mark.timeout(240)

#: A diagnosis in the ``latscope.diagnosis/1`` shape: two findings (one with the saturation experiment's gauges),
#: and one outcome of every other kind.
DIAGNOSIS: dict[str, Any] = {
    "schema": "latscope.diagnosis/1",
    "target": {"url": "http://127.0.0.1:8088/v1", "model": "lab-model", "http_version": "HTTP/1.1"},
    "timeline_summary": {
        "phases_ms": {
            "dns": 0.0,
            "connect": 0.4,
            "tls": 0.0,
            "send": 0.1,
            "wait": 46.0,
            "first_token": 40.2,
            "stream": 370.0,
        },
        "ttft_ms": 86.7,
        "e2e_ms": 456.7,
        "tpot_ms": 12.1,
    },
    "findings": [
        {
            "id": "queue-head-of-line",
            "title": "Long prompts block short ones",
            "severity": "high",
            "cost_ms": 1040.0,
            "cost_basis": "ms added to a short request's TTFT",
            "evidence": {"inflation_ms": 1040.0, "rounds": [1, 2]},
            "rule": "grew by 3 long prefills",
            "confidence": "high",
            "fix": "Schedule shortest-prompt-first.",
        },
        {
            "id": "capacity-saturation",
            "title": "Requests wait for a batch slot",
            "severity": "medium",
            "cost_ms": 310.5,
            "cost_basis": "mean TTFT one level past the knee",
            "rule": "waited past 4 in flight",
            "confidence": "high",
            "fix": "More slots, or admission control.",
            "evidence": {
                "knee": 4,
                "batch_series": [[0.0, 1, 0], [1.0, 2, 0], [2.0, 4, 0], [3.0, 4, 3], [4.0, 4, 7]],
                "level_starts": [["c=1", 0.0], ["c=2", 1.0], ["c=4", 2.0], ["c=8", 3.0]],
            },
        },
    ],
    "not_tested": [{"id": "tls-no-resumption", "reason": "the target is plain HTTP"}],
    "inconclusive": [{"id": "slow-request-parsing", "reason": "straddles the threshold", "evidence": {}}],
    "clear": [{"id": "stream-proxy-buffering", "reason": "TTFT does not grow with max_tokens", "evidence": {}}],
    "duration_s": 12.3,
    "quick": False,
}


def _check(page: Path, work: Path, views: list[str]) -> browser.PageLoad:
    """Open the page: no console error, no script error in the page, every chart rendered, the views present, no
    resource from the network; a screenshot per view."""
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"?https?:", text), "the page loads something from outside"
    loaded = browser.load(page, work)
    assert loaded.console_errors == [], loaded.console
    assert re.search(r'<pre id="render-errors" hidden=""></pre>', loaded.dom), "a script failed in the page"
    expected = int(loaded.body_attribute("data-charts-expected") or 0)
    rendered = int(loaded.body_attribute("data-charts-rendered") or 0)
    assert expected > 0 and rendered >= expected, (expected, rendered)
    assert loaded.dom.count('class="bk-') >= 1  # bokeh's views are in the document
    shots = work / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    for view in views:
        assert f'data-view="{view}"' in loaded.dom, view
        browser.screenshot(page, shots / f"{page.stem}-{view}.png", view=view)
    return loaded


def test_the_browser_check_catches_a_script_error_and_a_network_fetch(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="http://example.invalid/x.png">'
        '<script>throw new Error("boom")</script></body></html>'
    )
    loaded = browser.load(page, tmp_path / "b")
    errors = " ".join(loaded.console_errors)
    assert "boom" in errors


def test_a_bench_run_report_shows_every_view(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", requests_per_step=300, concurrency=(1, 8), output_tokens=32)
    page = tmp_path / "bench.html"
    page.write_text(run_html(run), encoding="utf-8")
    loaded = _check(page, tmp_path, ["summary", "waterfall", "streams", "cdf", "batch"])
    assert "concurrency=8" in loaded.dom and "TTFT p100" in page.read_text()


def test_report_html_on_the_command_line_writes_the_page(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "run", requests_per_step=100, concurrency=(2,), output_tokens=16)
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(run), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and page.stat().st_size > 1_000_000  # bokeh itself is inlined
    _check(page, tmp_path, ["waterfall"])


def test_a_probe_report_draws_the_recorded_requests_and_never_the_key(tmp_path: Path) -> None:
    page = tmp_path / "probe.html"
    with ServerThread(models_handler(paced_stream(6))) as server:
        result = CliRunner().invoke(
            cli,
            ["probe", server.base_url, "-n", "3", "--html", str(page)],
            env={"OPENAI_API_KEY": "sk-never-in-a-report"},
        )
    assert result.exit_code == 0, result.output
    assert "sk-never-in-a-report" not in page.read_text()
    loaded = _check(page, tmp_path, ["waterfall", "streams", "cdf"])
    assert "#3" in loaded.dom or "#3" in page.read_text()


def test_a_diagnosis_report_ranks_the_findings_and_lists_the_rest(tmp_path: Path) -> None:
    page = tmp_path / "diagnosis.html"
    page.write_text(diagnosis_html(DIAGNOSIS), encoding="utf-8")
    loaded = _check(page, tmp_path, ["waterfall", "findings", "outcomes", "batch"])
    first, second = loaded.dom.index("queue-head-of-line</code>"), loaded.dom.index("capacity-saturation</code>")
    assert first < second  # ranked by cost
    for listed in ("tls-no-resumption", "slow-request-parsing", "stream-proxy-buffering"):
        assert listed in loaded.dom


def test_a_comparison_report_of_two_runs(tmp_path: Path) -> None:
    a = write_synthetic_run(tmp_path / "a", requests_per_step=200, concurrency=(4,), output_tokens=16, seed=1)
    b = write_synthetic_run(tmp_path / "b", requests_per_step=200, concurrency=(4,), output_tokens=16, seed=2)
    page = tmp_path / "compare.html"
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--html", str(page)])
    assert result.exit_code == 0, result.output
    _check(page, tmp_path, ["step0", "cdf"])
