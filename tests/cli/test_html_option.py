"""``--html FILE`` on ``bench`` and ``diagnose``: the page is written, without the credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from latscope.cli.bench import command as bench_command
from latscope.cli.main import cli
from tests.diagnose.flaky_server import flaky_handler
from tests.support.load_sse_server import Script, ThreadedServer
from tests.support.stream_server import ServerThread

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


def test_diagnose_writes_the_html_report_of_its_diagnosis(tmp_path: Path) -> None:
    page = tmp_path / "diagnosis.html"
    with ServerThread(flaky_handler(every_429=0, every_reset=0)) as server:
        result = CliRunner().invoke(
            cli,
            ["diagnose", server.base_url, "--quick", "--only", "no-connection-reuse", "--html", str(page)],
            env={"OPENAI_API_KEY": "sk-not-in-the-diagnosis-page"},
        )
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert "sk-not-in-the-diagnosis-page" not in text
    for view in ("waterfall", "findings", "outcomes"):
        assert f'data-view="{view}"' in text
    assert "no-connection-reuse" in text  # ruled out here, with its reason
