"""benchmarks/diagnose_accuracy.py's tallies: what counts as named when true and when false, its cost tolerance
column, and a resumed file counted exactly as the runs that wrote it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import orjson
import pytest


@pytest.fixture(scope="module")
def accuracy() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "diagnose_accuracy.py"
    spec = importlib.util.spec_from_file_location("diagnose_accuracy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("diagnose_accuracy", module)
    spec.loader.exec_module(module)
    return module


def test_an_id_is_named_when_true_and_false_apart_and_only_true_positives_carry_a_cost(accuracy: ModuleType) -> None:
    tally = accuracy.Tally()
    tally.count("above", True, "few-slots", 0.1, True)
    tally.count("inconclusive", True, "few-slots", None, None)
    tally.count("above", True, "few-slots", 0.4, False)
    tally.count("above", False, "tuned", 0.9, True)  # a false positive: its cost is nobody's error
    tally.count("clear", False, "naive", None)
    tally.count(None, False, "nagle", None)  # not checked in that run: neither true nor false
    assert (tally.true_runs, tally.named, tally.inconclusive) == (3, 2, 1)
    assert (tally.false_runs, tally.named_false, tally.false_cases) == (2, 1, {"tuned"})
    assert tally.errors == [0.1, 0.4] and tally.within == [True, False]
    row = accuracy.markdown_table({"capacity-saturation": tally}).splitlines()[-1]
    assert row.split(" | ")[1:] == ["2/3 (67%)", "1", "0", "1/2 (50%)", "25% (40%)", "1/2 (50%) |"]


def test_a_resumed_file_counts_what_the_interrupted_run_counted(accuracy: ModuleType, tmp_path: Path) -> None:
    rows = [
        {"path": "loopback", "case": "few-slots", "run": 1, "expected": ["capacity-saturation"],
         "outcomes": {"capacity-saturation": "above", "queue-head-of-line": "clear"}, "error": 0.02, "within": True},
        {"path": "loopback", "case": "tuned", "run": 1, "expected": [],  # written before "within" was recorded
         "outcomes": {"capacity-saturation": "above", "queue-head-of-line": "clear"}, "error": None},
    ]  # fmt: skip
    resume = tmp_path / "runs.jsonl"
    resume.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + b"\n")
    tallies = {"capacity-saturation": accuracy.Tally(), "queue-head-of-line": accuracy.Tally()}
    kept: list[object] = []
    done = accuracy.resumed(resume, tallies, kept)
    assert done == {("loopback", "few-slots", 1), ("loopback", "tuned", 1)} and len(kept) == 2
    saturation = tallies["capacity-saturation"]
    assert (saturation.named, saturation.true_runs, saturation.named_false, saturation.false_runs) == (1, 1, 1, 1)
    assert saturation.within == [True]
    assert tallies["queue-head-of-line"].false_runs == 2 and tallies["queue-head-of-line"].named_false == 0
