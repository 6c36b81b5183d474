"""``compare`` of two diagnoses: findings that appeared, disappeared or changed cost; different experiments refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.report.compare.result import compare_diagnoses
from latscope.report.compare.workload import run_workload_differences

NAIVE: dict[str, Any] = {
    "schema": "latscope.diagnosis/1",
    "target": {"url": "http://127.0.0.1:8089/v1"},
    "timeline_summary": {"phases_ms": {"wait": 46.0, "first_token": 40.0}, "ttft_ms": 86.0},
    "findings": [
        {"id": "queue-head-of-line", "title": "FIFO", "cost_ms": 1040.0},
        {"id": "slow-request-parsing", "title": "parse", "cost_ms": 200.0},
        {"id": "stream-coalescing-nagle", "title": "nagle", "cost_ms": 40.0},
    ],
    "not_tested": [{"id": "tls-no-resumption", "reason": "plain HTTP"}],
    "inconclusive": [],
    "clear": [{"id": "batching-window", "reason": "none", "evidence": {}}],
    "quick": True,
    "checked": ["queue-head-of-line", "slow-request-parsing", "stream-coalescing-nagle", "batching-window"],
}
TUNED: dict[str, Any] = {
    **NAIVE,
    "target": {"url": "http://127.0.0.1:8088/v1"},
    "timeline_summary": {"phases_ms": {"wait": 44.0, "first_token": 0.3}, "ttft_ms": 45.0},
    "findings": [
        {"id": "slow-request-parsing", "title": "parse", "cost_ms": 60.0},
        {"id": "batching-window", "title": "window", "cost_ms": 20.0},
    ],
    "clear": [
        {"id": "queue-head-of-line", "reason": "no inflation", "evidence": {}},
        {"id": "stream-coalescing-nagle", "reason": "no hold", "evidence": {}},
    ],
}


def test_findings_that_appeared_disappeared_or_changed_cost_are_named() -> None:
    result = compare_diagnoses(NAIVE, TUNED)
    changes = {f.id: f.change for f in result.findings}
    assert changes == {
        "queue-head-of-line": "disappeared",
        "stream-coalescing-nagle": "disappeared",
        "slow-request-parsing": "cost changed",
        "batching-window": "appeared",
        "tls-no-resumption": "unchanged",
    }
    assert result.findings[0].id == "queue-head-of-line"  # the costliest first
    verdict = result.verdict()
    assert "2 finding(s) gone" in verdict and "1080 ms" in verdict and "batching-window" in verdict
    assert "slow-request-parsing −140 ms" in verdict


def test_a_small_cost_change_is_the_same_cost() -> None:
    moved = copy.deepcopy(NAIVE)
    moved["findings"][0]["cost_ms"] = 1045.0
    assert {f.id: f.change for f in compare_diagnoses(NAIVE, moved).findings}["queue-head-of-line"] == "unchanged"


def test_the_command_compares_two_diagnosis_files_and_refuses_different_experiments(tmp_path: Path) -> None:
    a, b = tmp_path / "naive.json", tmp_path / "tuned.json"
    a.write_bytes(orjson.dumps(NAIVE))
    b.write_bytes(orjson.dumps(TUNED))
    out = tmp_path / "c.json"
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "disappeared" in result.output and "appeared" in result.output
    assert orjson.loads(out.read_bytes())["kind"] == "diagnosis"
    full = tmp_path / "full.json"
    full.write_bytes(orjson.dumps({**TUNED, "quick": False}))
    refused = CliRunner().invoke(cli, ["compare", str(a), str(full)])
    assert refused.exit_code != 0 and "--quick: A True, B False" in refused.output
    assert CliRunner().invoke(cli, ["compare", str(a), str(full), "--force"]).exit_code == 0


def test_a_bench_run_and_a_diagnosis_are_not_compared(tmp_path: Path) -> None:
    a = tmp_path / "naive.json"
    a.write_bytes(orjson.dumps(NAIVE))
    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(cli, ["compare", str(run), str(a)])
    assert result.exit_code == 2 and "A is a bench, B a diagnosis" in result.output


def test_open_loop_rates_and_arrival_processes_are_workload_differences() -> None:
    def run(rate: float, process: str) -> dict[str, Any]:
        step = {"kind": "open", "rate_rps": rate, "process": process, "burstiness": 1.0, "max_concurrency": None}
        return {"config": {"workload": {"classes": []}, "steps": [step]}}

    assert run_workload_differences(run(5, "poisson"), run(5, "poisson")) == []
    [difference] = run_workload_differences(run(5, "poisson"), run(10, "constant"))
    assert "poisson arrivals at 5/s" in difference and "constant arrivals at 10/s" in difference
