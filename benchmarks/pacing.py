"""Does an open loop hit its target rate? latscope bench vs a sleep-per-gap dispatcher, at 100 / 1,000 / 5,000 req/s.

latscope bench runs open loops (constant and Poisson arrivals) against the lab with a zero-cost engine in its own
process (``--zero-cost``, ``max_tokens`` 1), through the same code path as ``latscope bench`` (a worker process on
uvloop). Reported per run:

* achieved rate — (n − 1) ÷ (last start − first start) over the measured requests, vs the target and vs the rate of
  the drawn schedule (a Poisson schedule of n arrivals differs from the target by ~1/√n by chance alone);
* dispatch lag — how late the dispatcher woke for each arrival (its absolute deadline → the moment it fired);
* client queue — scheduled → started, what the request itself saw;
* the client's loop CPU and the lab's CPU (a 2-core machine: one core each).

Controls, in the same run, sending nothing (so they show the pacing method alone, on this machine, at this moment):

* ``latscope pacer`` — latscope's dispatcher (:func:`latscope.load.pacing.sleep_until` on absolute deadlines, uvloop);
* ``sleep(gap)`` — what many load tools do: ``await asyncio.sleep(1 / rate)`` after each arrival, default asyncio loop.

Usage::

    .venv/bin/python benchmarks/pacing.py                   # ~1 minute
    .venv/bin/python benchmarks/pacing.py --rates 1000 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from procstat import proc_cpu_s

from latscope.lab.process import LabProcess
from latscope.load.arrivals import InterArrival, OpenLoop
from latscope.load.bench import run_bench
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workload import Workload
from latscope.wire.target import Target

RATES = (100, 1_000, 5_000)
WARMUP_S = 1.0


def seconds_for(rate: int, requested: float | None) -> float:
    """Measured seconds per run: enough arrivals for stable percentiles, short enough to keep the suite quick."""
    if requested is not None:
        return requested
    return {100: 10.0, 1_000: 5.0}.get(rate, 3.0)


def run_latscope(url: str, lab_pid: int, rate: int, process: InterArrival, seconds: float) -> dict[str, Any]:
    config = BenchConfig(
        target=Target.resolve(url),
        model="lab-model",
        steps=(OpenLoop(float(rate), process),),
        workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(1), seed=1),
        duration_s=seconds,
        warmup_s=WARMUP_S,
        drain_s=5.0,
    )
    with tempfile.TemporaryDirectory(prefix="latscope-pacing-") as tmp:
        lab0, wall0 = proc_cpu_s(lab_pid), time.monotonic()
        result = run_bench(config, Path(tmp))
        lab_cpu = (proc_cpu_s(lab_pid) - lab0) / (time.monotonic() - wall0)
    [step] = result.steps
    lag, queue, client = step.schedule_lag_ms, step.overall.metrics.get("client_queue_ms"), step.client
    achieved = step.achieved_rps or 0.0
    return {
        "client": "latscope",
        "rate": rate,
        "process": str(process),
        "requests": step.overall.requests,
        "errors": step.overall.errors,
        "schedule_rps": step.schedule_rps,
        "achieved_rps": achieved,
        "error_pct": (achieved / rate - 1) * 100,
        "vs_schedule_pct": (achieved / step.schedule_rps - 1) * 100 if step.schedule_rps else float("nan"),
        "lag_p50": lag.p50 if lag else float("nan"),
        "lag_p99": lag.p99 if lag else float("nan"),
        "lag_max": lag.max if lag else float("nan"),
        "queue_p99": queue.p99 if queue else float("nan"),
        "client_cpu": client.loop_cpu_mean if client and client.loop_cpu_mean is not None else float("nan"),
        "lab_cpu": lab_cpu,
        "workers": client.workers if client else 1,
        "errors_by_kind": dict(step.overall.errors_by_kind),
        "errors_by_phase": dict(step.overall.errors_by_phase),
    }


async def naive_dispatcher(rate: int, seconds: float) -> list[int]:
    """Fire at 1/rate intervals by sleeping the gap after each arrival (sending nothing)."""
    gap = 1.0 / rate
    fired: list[int] = []
    end = time.monotonic_ns() + int(seconds * 1e9)
    while True:
        now = time.monotonic_ns()
        if now >= end:
            return fired
        fired.append(now)
        await asyncio.sleep(gap)


async def latscope_pacer(rate: int, seconds: float) -> list[int]:
    """latscope's dispatcher without requests: wake on each absolute deadline (constant gaps)."""
    from latscope.load.pacing import sleep_until

    start = time.monotonic_ns() + 10_000_000
    gap_ns = 1e9 / rate
    lags: list[int] = []
    for i in range(int(seconds * rate)):
        lags.append(await sleep_until(start + int(i * gap_ns)))
    return lags


def control_row(client: str, rate: int, fired_ns: np.ndarray, lag_ms: np.ndarray) -> dict[str, Any]:
    """A row for a control that sends nothing: when each arrival fired (ns) and how late (ms)."""
    achieved = (fired_ns.size - 1) / ((fired_ns[-1] - fired_ns[0]) / 1e9)
    return {
        "client": client,
        "rate": rate,
        "process": "constant",
        "requests": int(fired_ns.size),
        "errors": 0,
        "schedule_rps": float(rate),
        "achieved_rps": achieved,
        "error_pct": (achieved / rate - 1) * 100,
        "vs_schedule_pct": (achieved / rate - 1) * 100,
        "lag_p50": float(np.percentile(lag_ms, 50)),
        "lag_p99": float(np.percentile(lag_ms, 99)),
        "lag_max": float(lag_ms.max()),
        "queue_p99": float("nan"),
        "client_cpu": float("nan"),
        "lab_cpu": float("nan"),
        "workers": 1,
    }


def run_pacer(rate: int, seconds: float) -> dict[str, Any]:
    from latscope.wire.loop import run as run_uvloop

    lags_ns = np.array(run_uvloop(latscope_pacer(rate, seconds)), dtype=np.int64)
    fired = np.arange(lags_ns.size) * (1e9 / rate) + lags_ns
    return control_row("latscope pacer", rate, fired, lags_ns / 1e6)


def run_naive(rate: int, seconds: float) -> dict[str, Any]:
    fired = np.array(asyncio.run(naive_dispatcher(rate, seconds)), dtype=np.int64)
    deadlines = fired[0] + np.arange(fired.size) * (1e9 / rate)
    lag = (fired - deadlines) / 1e6  # how far behind the intended schedule each arrival fired
    return control_row("sleep(gap)", rate, fired, lag)


def fmt(v: float, digits: int = 3) -> str:
    return "–" if v != v else f"{v:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default=",".join(str(r) for r in RATES))
    parser.add_argument("--seconds", type=float, help="measured seconds per run (default: 10 / 5 / 3 by rate)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r]
    rows: list[dict[str, Any]] = []
    print(f"# open-loop pacing ({os.cpu_count()} cores; lab --zero-cost in its own process; max_tokens 1)\n")
    print(
        "| target req/s | arrivals | client | n | scheduled req/s | achieved req/s | vs target | vs schedule "
        "| lag p50 ms | lag p99 ms | lag max ms | queue p99 ms | client CPU | lab CPU | errors |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with LabProcess(zero_cost=True, args=["--max-batch", "4096", "--kv-blocks", "200000"]) as lab:
        assert lab.url is not None and lab.pid is not None
        for rate in rates:
            seconds = seconds_for(rate, args.seconds)
            runs = [
                run_latscope(lab.url, lab.pid, rate, p, seconds) for p in (InterArrival.CONSTANT, InterArrival.POISSON)
            ]
            runs.append(run_pacer(rate, seconds))
            runs.append(run_naive(rate, seconds))
            for r in runs:
                rows.append(r)
                print(
                    f"| {rate:,} | {r['process']} | {r['client']} | {r['requests']:,} | "
                    f"{r['schedule_rps']:,.1f} | {r['achieved_rps']:,.1f} | {r['error_pct']:+.2f}% | "
                    f"{r['vs_schedule_pct']:+.2f}% | {fmt(r['lag_p50'])} | {fmt(r['lag_p99'])} | "
                    f"{fmt(r['lag_max'], 2)} | {fmt(r['queue_p99'], 2)} | {fmt(r['client_cpu'] * 100, 0)}% | "
                    f"{fmt(r['lab_cpu'] * 100, 0)}% | {r['errors']} |",
                    flush=True,
                )
    print()
    for r in rows:
        if r["client"] == "latscope" and r["rate"] == 1_000 and r["process"] == "constant":
            within = abs(r["error_pct"]) <= 1.0
            print(
                f"- 1,000 req/s constant: achieved {r['achieved_rps']:,.1f} ({r['error_pct']:+.2f}%, target ±1%): "
                f"{'met' if within else 'MISSED'}; dispatch lag p99 {r['lag_p99']:.3f} ms (target < 1 ms): "
                f"{'met' if r['lag_p99'] < 1 else 'MISSED'}"
            )
    for r in rows:
        if r.get("errors_by_kind"):
            kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(r["errors_by_kind"].items()))
            kinds += "; by phase: " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["errors_by_phase"].items()))
            print(
                f"- {r['rate']:,} req/s {r['process']}: {r['errors']:,} errors ({kinds}); "
                f"lab CPU {r['lab_cpu']:.0%}, client CPU {r['client_cpu']:.0%}: past what this machine serves end "
                "to end, requests still "
                "unanswered when the 5 s drain ran out were cancelled"
            )
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return 0


if __name__ == "__main__":
    sys.exit(main())
