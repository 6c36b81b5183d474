"""``latscope bench`` and ``latscope report`` from the command line; worker processes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pandas as pd
import pytest
from click.testing import CliRunner

from latscope.cli.bench import command as bench_command
from latscope.cli.report import command as report_command
from latscope.load.arrivals import ClosedLoop, OpenLoop
from latscope.load.bench import run_bench
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workload import Workload
from latscope.wire import Timeouts
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ThreadedServer

pytestmark = pytest.mark.timeout(120)


def test_bench_then_report_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    runner = CliRunner()
    with ThreadedServer(Script(gap_s=0.0005)) as server:
        result = runner.invoke(
            bench_command,
            [
                server.url,
                "-c",
                "1,2",
                "-n",
                "6",
                "--warmup",
                "2",
                "--output-tokens",
                "4",
                "--prompt-tokens",
                "uniform(4,12)",
                "--slo",
                "ttft=5s,tpot=1s",
                "--inline",
                "-o",
                str(out),
                "-H",
                "X-Team: perf",
                "--api-key",
                "sk-do-not-store",
            ],
        )
    assert result.exit_code == 0, result.output
    assert "concurrency=2" in result.output and "goodput" in result.output
    assert "sk-do-not-store" not in (out / "run.json").read_text()

    shown = runner.invoke(report_command, [str(out)])
    assert shown.exit_code == 0, shown.output
    assert "sweep" in shown.output and "TTFT" in shown.output

    as_json = runner.invoke(report_command, [str(out), "--json"])
    data = orjson.loads(as_json.stdout)
    assert [s["label"] for s in data["steps"]] == ["concurrency=1", "concurrency=2"]
    assert data["steps"][0]["summary"]["overall"]["requests"] == 6

    strict = runner.invoke(report_command, [str(out), "--json", "--slo", "ttft=1us"])
    assert orjson.loads(strict.stdout)["steps"][0]["summary"]["overall"]["goodput_fraction"] == 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-c", "2", "-r", "5"], "not both"),
        (["--prompt-tokens", "gauss(3)"], "unknown length shape"),
        (["--slo", "ttft"], "METRIC=DURATION"),
        (["--class", "x:colour=red"], "unknown key"),
        (["--duration", "soon"], "cannot read duration"),
        (["--workers", "many"], "auto"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench_command, ["http://127.0.0.1:9/v1", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_report_of_something_else_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(report_command, [str(tmp_path)])
    assert result.exit_code == 1 and "run.json" in result.output


def test_worker_processes_share_the_schedule_and_the_run_merges(tmp_path: Path) -> None:
    with ThreadedServer(Script(gap_s=0.0005)) as server:
        config = BenchConfig(
            target=Target.resolve(server.url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
            steps=(ClosedLoop(4), OpenLoop(200.0)),
            workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(3)),
            requests=20,
            warmup_requests=2,
            workers=2,
        )
        result = run_bench(config, tmp_path)
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    for step in (0, 1):
        rows = requests[requests.step == step]
        assert sorted(rows.worker.unique()) == [0, 1]
        assert len(rows) == 22 and sorted(rows.request_id) == list(range(22))
        assert rows.warmup.sum() == 2 and rows.ok.all()
    assert [s.client.workers if s.client else 0 for s in result.steps] == [2, 2]
    open_loop = requests[requests.step == 1].sort_values("request_id")
    # one global schedule: worker 1's arrivals fall between worker 0's
    assert (open_loop.worker.to_numpy()[:6] == [0, 1, 0, 1, 0, 1]).all()
    assert open_loop.scheduled_at_ms.is_monotonic_increasing


def test_a_messages_file_with_the_completions_api_is_refused_before_anything_runs(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    result = CliRunner().invoke(
        bench_command, ["http://127.0.0.1:9/v1", "--api", "completions", "--prompts", str(prompts), "-m", "x"]
    )
    assert result.exit_code == 2 and "needs 'prompt'" in result.output
