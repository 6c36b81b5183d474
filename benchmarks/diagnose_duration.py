"""How long ``latscope diagnose`` takes on the embedded lab (the README's first command), quick and full, and where
the time goes: each experiment's share, over a few runs, against the targets of a full run within 60 s and a quick
one within 30 s on a 2-core machine.

Usage::

    .venv/bin/python benchmarks/diagnose_duration.py            # 3 quick and 3 full runs: about 4 minutes
    .venv/bin/python benchmarks/diagnose_duration.py --runs 5 --quick-only

Run it alone: on two cores anything else running moves every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import defaultdict

from latscope.diagnose import diagnose
from latscope.lab import Lab

#: The targets, s: what the README promises of the embedded lab's diagnosis on two cores.
TARGET_S = {"quick": 30.0, "full": 60.0}


async def one(quick: bool) -> tuple[float, dict[str, float]]:
    """One diagnosis of the naive lab (what ``latscope diagnose`` without a URL runs): wall time (s, lab start
    included) and each experiment's duration (s)."""
    started = time.monotonic()
    async with Lab(profile="naive") as lab:
        result = await diagnose(lab.url, quick=quick)
    return time.monotonic() - started, {e.name: e.duration_s for e in result.experiments}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.1f} ({min(values):.1f}–{max(values):.1f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    parser.add_argument("--quick-only", action="store_true", help="quick runs only")
    args = parser.parse_args()
    kinds = ["quick"] if args.quick_only else ["quick", "full"]
    for kind in kinds:
        walls: list[float] = []
        per: dict[str, list[float]] = defaultdict(list)
        for index in range(args.runs):
            wall, experiments = asyncio.run(one(kind == "quick"))
            walls.append(wall)
            for name, seconds in experiments.items():
                per[name].append(seconds)
            print(f"{kind} run {index + 1}/{args.runs}: {wall:.1f} s", flush=True)
        verdict = "within" if max(walls) <= TARGET_S[kind] else "OVER"
        print(f"\n{kind}: {_spread(walls)} s median (min–max), target {TARGET_S[kind]:g} s: {verdict}")
        print(f"{'experiment':>14} {'s median (min–max)':>22}")
        for name, seconds in sorted(per.items(), key=lambda kv: -statistics.median(kv[1])):
            print(f"{name:>14} {_spread(seconds):>22}")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
