"""``--html FILE`` on ``bench``: the run's page is written beside the run directory, without the credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from latscope.cli.bench import command as bench_command
from tests.support.load_sse_server import Script, ThreadedServer

pytestmark = pytest.mark.timeout(120)


def test_bench_writes_the_html_report_of_its_run(tmp_path: Path) -> None:
    page = tmp_path / "bench.html"
    with ThreadedServer(Script(gap_s=0.0005)) as server:
        result = CliRunner().invoke(
            bench_command,
            [
                server.url,
                "-c",
                "1,2",
                "-n",
                "6",
                "--output-tokens",
                "4",
                "--inline",
                "-o",
                str(tmp_path / "run"),
                "--api-key",
                "sk-not-in-the-page",
                "--html",
                str(page),
                "--no-server-metrics",
            ],
        )
    assert result.exit_code == 0, result.output
    assert f"wrote {page}" in result.output.replace("\n", "")
    text = page.read_text(encoding="utf-8")
    assert "sk-not-in-the-page" not in text
    for view in ("summary", "waterfall", "streams", "cdf"):
        assert f'data-view="{view}"' in text
    assert "concurrency=2" in text


def test_an_html_path_that_cannot_be_written_fails_before_the_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        bench_command, ["http://127.0.0.1:9/v1", "-n", "1", "--html", str(tmp_path / "missing" / "x.html")]
    )
    assert result.exit_code == 2 and "--html" in result.output
