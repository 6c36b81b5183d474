"""Load generation: workloads, arrival processes, the runner and summaries (``latscope bench``); the run directory it
writes is :mod:`latscope.runs`.

Modules, one concept each:

=============  ======================================================================================================
``lengths``    token-length distributions (fixed, uniform, normal, lognormal)
``workload``   workload classes, mixes, prompt files, the reproducible request plan
``arrivals``   closed loop, open loop (Poisson, constant, gamma), the global arrival schedule
``pacing``     waking on absolute deadlines with sub-millisecond lateness
``runner``     one worker's share of a step on one event loop
``workers``    worker processes with a common start
``stats``      percentile summaries
``slo``        service-level objectives and goodput
``summary``    per-step, per-class aggregates and warnings
``health``     the client's own CPU, loop lag and memory
``bench``      the entry points: :func:`run_bench`, :func:`bench_async`, :func:`summarize_dir`
=============  ======================================================================================================

What a run looks like in the terminal lives in :mod:`latscope.report` (``run``: the summary tables, ``progress``:
the live display).

Typical use from Python::

    target = Target.resolve("http://127.0.0.1:8000/v1")
    config = BenchConfig(target, steps=(ClosedLoop(8),), workload=Workload.single(), requests=200)
    result = run_bench(config, Path("runs/my-run"))
    result.steps[0].overall.metrics["ttft_ms"].p99
"""

from latscope.load.arrivals import ClosedLoop, InterArrival, OpenLoop, Schedule
from latscope.load.bench import RunResult, bench_async, run_bench, summarize_dir
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist, parse_length
from latscope.load.slo import Slo, parse_slo
from latscope.load.stats import Dist, describe
from latscope.load.summary import GroupSummary, StepSummary
from latscope.load.workload import Plan, PlannedRequest, Workload, WorkloadClass, parse_class

__all__ = [
    "BenchConfig",
    "ClosedLoop",
    "Dist",
    "GroupSummary",
    "InterArrival",
    "LengthDist",
    "OpenLoop",
    "Plan",
    "PlannedRequest",
    "RunResult",
    "Schedule",
    "Slo",
    "StepSummary",
    "Workload",
    "WorkloadClass",
    "bench_async",
    "describe",
    "parse_class",
    "parse_length",
    "parse_slo",
    "run_bench",
    "summarize_dir",
]
