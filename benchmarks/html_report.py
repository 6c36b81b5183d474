"""How long the HTML report of a large bench run takes to build and how large it is: a synthetic run directory
(``tests/support/synthetic_run.py``: closed-loop steps, every request's phases and server timings, one event per
token) of ``--requests`` requests over two steps, then ``run_html`` on it in a fresh process (so bokeh's import is
counted, as on the command line), and the same for ``latscope compare --html`` of two such runs. Prints one row per
case: requests, events, build seconds (best and median of ``--runs``), file MB.

Usage::

    .venv/bin/python benchmarks/html_report.py                      # 10k requests, 64 tokens each, ~1 minute
    .venv/bin/python benchmarks/html_report.py --requests 2000 --runs 1
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.synthetic_run import write_synthetic_run  # noqa: E402

BUILD = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from latscope.report.html import run_html
page = run_html(Path(sys.argv[1]))
Path(sys.argv[2]).write_text(page, encoding="utf-8")
print(time.perf_counter() - started)
"""

COMPARE = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from latscope.report.compare.result import compare_runs
from latscope.report.compare.samples import read_samples
from latscope.report.html.compare import compare_runs_html
a, b = read_samples(Path(sys.argv[1])), read_samples(Path(sys.argv[2]))
page = compare_runs_html(compare_runs(a, b), a, b)
Path(sys.argv[3]).write_text(page, encoding="utf-8")
print(time.perf_counter() - started)
"""


def _timed(script: str, *args: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
        out.append(float(done.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests in the run (two steps)")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens (events) per request")
    parser.add_argument("--runs", type=int, default=3, help="builds per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        started = time.perf_counter()
        per_step = args.requests // 2
        a = write_synthetic_run(base / "a", requests_per_step=per_step, output_tokens=args.tokens, seed=1)
        b = write_synthetic_run(base / "b", requests_per_step=per_step, output_tokens=args.tokens, seed=2)
        print(f"synthetic runs written in {time.perf_counter() - started:.1f} s")
        events = args.requests * args.tokens
        rows = []
        report = base / "report.html"
        times = _timed(BUILD, str(a), str(report), runs=args.runs)
        rows.append(("report RUN --html", times, report.stat().st_size))
        compare = base / "compare.html"
        times = _timed(COMPARE, str(a), str(b), str(compare), runs=args.runs)
        rows.append(("compare A B --html", times, compare.stat().st_size))
    print(f"\n{'case':<20} {'requests':>9} {'events':>10} {'best s':>7} {'median s':>9} {'file MB':>8}")
    for name, times, size in rows:
        print(
            f"{name:<20} {args.requests:>9,} {events:>10,} {min(times):>7.2f} {statistics.median(times):>9.2f} "
            f"{size / 1e6:>8.2f}"
        )
    print("\ntarget: under 10 s and under 5 MB for a 10k-request run")


if __name__ == "__main__":
    main()
