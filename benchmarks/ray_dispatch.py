"""What running through Ray costs an open loop: 1 local worker, 2 local workers and 2 Ray actors at the same rates.

The lab runs with a zero-cost engine in its own process (``max_tokens`` 1), and a two-node Ray cluster is started on
this machine (``tests/support/raycluster.py``: one CPU per node, no dashboard, stopped at the end). Each
configuration runs the same open loop (constant arrivals) through ``run_bench`` — worker processes, or Ray actors
with ``ray_address`` — and the table shows:

* achieved rate — (n − 1) ÷ (last start − first start) over the measured requests, vs the target;
* dispatch lag — how late the dispatcher woke for each arrival (its absolute deadline → the moment it fired), p50 and
  p99;
* errors;
* Ray daemons' CPU — what the cluster's own processes (GCS, raylets, agents, monitors; not the actors) used during
  the run, in % of one core: taken from the cores the lab and the workers share, in the local rows too.

Target: 2 Ray actors no worse than 2 local worker processes. On a 2-core machine every configuration shares the
cores with the lab (and Ray's own daemons), so compare the rows with each other, not with a quiet server.

The cluster runs with Ray's own health-check periods, as a user's cluster does (the tests' clusters check every
300 ms so that a killed node is noticed at once). With ``--repeat N`` every configuration runs N times, interleaved
(each round runs every configuration once), and each column shows the lowest and highest of the N runs (lag p99:
and their median, from three runs on).

Usage::

    .venv/bin/python benchmarks/ray_dispatch.py                       # ~1 minute
    .venv/bin/python benchmarks/ray_dispatch.py --rates 200 --seconds 3
    .venv/bin/python benchmarks/ray_dispatch.py --rates 500,2000 --workers 2,4 --repeat 3   # a machine of 8+ cores
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.raycluster

from procstat import proc_cpu_s
from tests.support.raycluster import RayCluster

from latscope.lab.process import LabProcess
from latscope.load.arrivals import InterArrival, OpenLoop
from latscope.load.bench import run_bench
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workload import Workload
from latscope.wire.target import Target

RATES = (100, 500)
WARMUP_S = 0.5


def daemon_cpu_s(cluster: RayCluster) -> float:
    """CPU seconds (user + system) used so far by the cluster's own processes: GCS, raylets, agents, monitors —
    every process of its sessions but the workers and actors (``ray::…`` processes, which come and go per step)."""
    total = 0.0
    for pid in cluster.pids():
        try:
            if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::"):
                total += proc_cpu_s(pid)
        except OSError:
            continue  # gone since the listing
    return total


def run_one(
    url: str, rate: int, seconds: float, workers: int, ray_address: str | None, cluster: RayCluster
) -> dict[str, Any]:
    config = BenchConfig(
        target=Target.resolve(url),
        model="lab-model",
        steps=(OpenLoop(float(rate), InterArrival.CONSTANT),),
        workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(1), seed=1),
        duration_s=seconds,
        warmup_s=WARMUP_S,
        drain_s=5.0,
        workers=workers,
        server_metrics=False,
    )
    with tempfile.TemporaryDirectory(prefix="latscope-ray-dispatch-") as tmp:
        cpu0, wall0 = daemon_cpu_s(cluster), time.monotonic()
        result = run_bench(config, Path(tmp), ray_address=ray_address)
        daemons = (daemon_cpu_s(cluster) - cpu0) / (time.monotonic() - wall0)
    [step] = result.steps
    lag = step.schedule_lag_ms
    achieved = step.achieved_rps or 0.0
    return {
        "rate": rate,
        "client": f"{workers} {'Ray actor' if ray_address else 'local worker'}{'s' * (workers > 1)}",
        "requests": step.overall.requests,
        "errors": step.overall.errors,
        "achieved_rps": achieved,
        "error_pct": (achieved / rate - 1) * 100,
        "lag_p50": lag.p50 if lag else float("nan"),
        "lag_p99": lag.p99 if lag else float("nan"),
        "daemons_pct": daemons * 100,
    }


def span(runs: list[dict[str, Any]], key: str, fmt: str, *, median: bool = False) -> str:
    """The lowest and highest of ``key`` over the runs ("a" when they agree or there is one run); with ``median``
    and three runs or more, the median too ("low–high (median m)")."""
    values = sorted(r[key] for r in runs)
    low, high = values[0], values[-1]
    text = format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}–{high:{fmt}}"
    if median and len(values) >= 3:
        text += f" (median {statistics.median(values):{fmt}})"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default=",".join(str(r) for r in RATES))
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run")
    parser.add_argument(
        "--workers", default="2", help="process counts compared, local workers against Ray actors (e.g. 2,4)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration, interleaved")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r]
    counts = [int(w) for w in args.workers.split(",") if w]
    nodes = 2
    cores = os.cpu_count()
    print(
        f"# open-loop dispatch: local workers vs Ray actors ({cores} cores; lab --zero-cost; max_tokens 1; "
        f"{args.seconds:g} s per run; {args.repeat} run(s) each, lowest–highest)\n"
    )
    print(
        "| target req/s | client | n | achieved req/s | vs target | lag p50 ms | lag p99 ms | errors "
        "| Ray daemons' CPU |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    cluster = RayCluster(nodes=nodes, cpus_per_node=math.ceil(max(counts) / nodes), fast_failure_detection=False)
    with (
        LabProcess(zero_cost=True, args=["--max-batch", "4096", "--kv-blocks", "200000"]) as lab,
        cluster as address,
    ):
        assert lab.url is not None
        configs: list[tuple[int, str | None]] = [(1, None)]
        for count in counts:
            configs += [(count, None), (count, address)]
        for rate in rates:
            runs: dict[tuple[int, str | None], list[dict[str, Any]]] = {c: [] for c in configs}
            for _ in range(args.repeat):
                for workers, ray_address in configs:
                    runs[workers, ray_address].append(
                        run_one(lab.url, rate, args.seconds, workers, ray_address, cluster)
                    )
            for config in configs:
                rs = runs[config]
                print(
                    f"| {rate:,} | {rs[0]['client']} | {span(rs, 'requests', ',')} | "
                    f"{span(rs, 'achieved_rps', ',.2f')} | {span(rs, 'error_pct', '+.2f')}% | "
                    f"{span(rs, 'lag_p50', '.3f')} | {span(rs, 'lag_p99', '.3f', median=True)} | "
                    f"{sum(r['errors'] for r in rs)} | "
                    f"{span(rs, 'daemons_pct', '.0f')}% |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
