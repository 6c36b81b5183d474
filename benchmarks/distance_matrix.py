"""The lab's fault matrix diagnosed across network paths: what each fault gives at each distance, its cost against
the ground truth measured over the same path, and how long the diagnosis took.

The client runs in a network namespace behind a userspace relay that delays every packet (tests/support/netpath.py;
needs root and /dev/net/tun), the lab in the root namespace. The cases and their ground truths are the ones
tests/diagnose/test_fault_matrix_distance.py asserts (tests/diagnose/distance_cases.py); this prints them all as a
table, each case ``--runs`` times so the spread shows. Then ``latscope diagnose`` itself, as a process in the
namespace, quick and full against the tuned lab, to time the command a user would run.

Usage::

    .venv/bin/python benchmarks/distance_matrix.py                       # every case at 20 and 50 ms: ~15 minutes
    .venv/bin/python benchmarks/distance_matrix.py --paths 20 --cases nagle,naive --runs 3
    .venv/bin/python benchmarks/distance_matrix.py --paths 20,20:20 --json out.json   # 20:20 = 20 ms behind 20 Mbit/s
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path as FilePath
from typing import Any

import orjson

sys.path.insert(0, str(FilePath(__file__).resolve().parents[1]))

from tests.diagnose.distance_cases import NAIVE_CASE, SINGLE, TEST_COST, TUNED, Case, run_case
from tests.support.distances import Path
from tests.support.netpath import NetworkPath, unsupported_reason

from latscope.lab.app import Lab

CASES = (*TUNED, NAIVE_CASE, *SINGLE)
#: The command installed beside this interpreter.
LATSCOPE = str(FilePath(sys.executable).with_name("latscope"))


def parse_path(text: str) -> Path:
    """``20`` → 20 ms one way; ``20:20`` → 20 ms behind 20 Mbit/s."""
    delay, _, rate = text.partition(":")
    return Path(float(delay), float(rate) if rate else None)


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


async def matrix(paths: list[Path], cases: list[Case], runs: int, rows: list[dict[str, Any]]) -> None:
    print(f"{'path':>12} {'case':>16} {'ok':>4} {'cost ms':>20} {'truth ms':>20} {'diagnose s':>18}  found")
    for path in paths:
        with NetworkPath(one_way_delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net:
            for case in cases:
                costs: list[float] = []
                truths: list[float] = []
                seconds: list[float] = []
                passed = 0
                found: set[str] = set()
                for _ in range(runs):
                    run = await run_case(net, case)
                    above = set(run.above_low())
                    found |= above
                    passed += above == case.expected and run.cost_within_tolerance(case)
                    seconds.append(run.seconds)
                    cost = run.cost_ms(case)
                    if cost is not None:
                        costs.append(cost)
                    if run.truth_ms is not None:
                        truths.append(run.truth_ms)
                print(
                    f"{path!s:>12} {case.name:>16} {passed:>2}/{runs} {_spread(costs):>20} {_spread(truths):>20} "
                    f"{_spread(seconds):>18}  {','.join(sorted(found)) or '-'}",
                    flush=True,
                )
                rows.append(
                    {
                        "path": str(path),
                        "case": case.name,
                        "passed": passed,
                        "runs": runs,
                        "cost_ms": costs,
                        "truth_ms": truths,
                        "seconds": seconds,
                        "found": sorted(found),
                    }
                )


async def command_times(path: Path, runs: int, rows: list[dict[str, Any]]) -> None:
    """``latscope diagnose`` (quick and full) as a process in the client namespace, against the tuned lab."""
    print(f"\nlatscope diagnose against the tuned lab, {path} one way:")
    with NetworkPath(one_way_delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net:
        async with Lab(cost=TEST_COST, host=net.server_host) as lab:
            for mode in ("--quick", None):
                seconds = []
                for _ in range(runs):
                    started = time.monotonic()
                    argv = [LATSCOPE, "diagnose", lab.url, "--json", "-"]
                    done = await asyncio.to_thread(net.command, [*argv, *([mode] if mode else [])], 300.0)
                    seconds.append(time.monotonic() - started)
                    if done.returncode != 0:
                        raise SystemExit(f"latscope diagnose exited {done.returncode}:\n{done.stderr[-2000:]}")
                label = "quick" if mode else "full"
                print(f"{label:>8}: {_spread(seconds)} s", flush=True)
                rows.append({"command": f"diagnose {label}", "path": str(path), "seconds": seconds})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paths", default="20,50", help="comma-separated one-way delays, ms[:Mbit/s] (default 20,50)")
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--runs", type=int, default=1, help="diagnoses per case (default 1)")
    parser.add_argument("--command-runs", type=int, default=2, help="timed `latscope diagnose` runs per mode")
    parser.add_argument("--json", type=FilePath, help="also write the rows here")
    args = parser.parse_args()
    reason = unsupported_reason()
    if reason is not None:
        print(f"cannot build a network path here: {reason}", file=sys.stderr)
        return 2
    paths = [parse_path(p) for p in args.paths.split(",") if p]
    wanted = {c for c in args.cases.split(",") if c}
    cases = [c for c in CASES if not wanted or c.name in wanted]
    rows: list[dict[str, Any]] = []
    asyncio.run(matrix(paths, cases, args.runs, rows))
    if args.command_runs:
        asyncio.run(command_times(paths[0], args.command_runs, rows))
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
