"""``latscope bench --retries`` from the command line: the options, the help that teaches them, the report."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest
from click.testing import CliRunner

from latscope.cli.bench import command as bench_command
from latscope.cli.report import command as report_command
from tests.support.load_sse_server import Script, ThreadedServer

pytestmark = pytest.mark.timeout(60)

KEYED = ("--output-tokens", "4", "--idempotency-keys", "--no-server-metrics", "--inline", "-o")


def test_the_help_says_what_is_retried_and_how_long_it_waits() -> None:
    result = CliRunner().invoke(bench_command, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for phrase in ("--retries", "Retry-After", "full jitter", "x-should-retry: false", "--idempotency-keys"):
        assert phrase in text


def test_retries_from_the_command_line_are_saved_counted_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # every third request is refused once with a 30 ms Retry-After
    script = Script(status=lambda n: 429 if n % 3 == 0 else None, error_headers=lambda n: {"retry-after-ms": "30"})
    with ThreadedServer(script) as server:
        result = CliRunner().invoke(
            bench_command,
            [server.url, "-n", "6", "--retries", "2", "--retry-backoff", "10ms", *KEYED, str(out)],
            terminal_width=200,
        )
    assert result.exit_code == 0, result.output
    data = orjson.loads((out / "run.json").read_bytes())
    assert data["config"]["retries"] == 2 and data["config"]["idempotency_keys"] is True
    assert data["config"]["retry_backoff_s"] == pytest.approx(0.01)
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests.ok.all() and requests.attempts.sum() > 6
    assert "retries" in result.output and "requests retried" in result.output

    shown = CliRunner().invoke(report_command, [str(out)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "requests retried" in shown.output and "retry-amplification" in shown.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--retries", "-1"], "--retries"), (["--retry-backoff", "soon"], "cannot read duration")],
)
def test_bad_retry_options_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench_command, ["http://127.0.0.1:9/v1", *args])
    assert result.exit_code == 2 and message in result.output
