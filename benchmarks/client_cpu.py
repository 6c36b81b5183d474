"""The bench client's CPU per event, this checkout against another, on the same lab at the same load.

``fidelity.py`` times each client against a lab started from the checkout being measured, so a comparison of two
commits with it also compares their labs (what each writes per token and per request). This runs both clients
against one lab, started from this checkout, at ``fidelity.py``'s levels (streams × decode step, requests of about
a second), alternating the two from round to round, each run in a fresh process:

- this checkout with ``--stamps`` (default ``kernel``);
- the checkout at ``--baseline`` (its ``src`` directory, put first on ``PYTHONPATH``) with ``--baseline-stamps``
  (default ``user``: a checkout from before kernel stamps has no other).

Each run is one ``bench_async`` as fidelity runs it (one worker, warm-up 0.5 s, drain 1 s, full recording, merge,
``run.json``), after one short unrecorded run in the same process. Its cost is the process's CPU time (user +
system, ``getrusage``) over the whole bench run, divided by the events it recorded; the CPU share is that time over
the run's wall time. Beside them: the system time's part, and the events each read carried (a client that falls
behind reads several events at once and pays less per event, so two clients compare only at the same figure).

On a shared 2-core VM one run moves by ±15 %: the table gives the median and the range of ``--rounds`` runs, and only
a difference larger than the ranges means something. For a count that the machine does not move, see
``bench_instructions.py``.

Run: ``.venv/bin/python benchmarks/client_cpu.py --baseline /path/to/other/checkout/src [--levels 5000,20000]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
WARMUP_S = 0.5
PRIME_S = 0.5
PROMPT_TOKENS = 16
RUN_TIMEOUT_S = 300


def bench_config(url: str, streams: int, max_tokens: int, stamps: str, **bounds: Any) -> Any:
    """The ``BenchConfig`` both this benchmark and ``bench_instructions.py`` run: one worker, a closed loop of
    ``streams`` users, prompts of :data:`PROMPT_TOKENS` and ``max_tokens`` tokens, with ``bounds`` (duration,
    requests, …) on top. Uses only what every checkout's bench has: ``stamps`` is passed only when it is not
    ``user`` (a checkout from before kernel stamps has no such option, and only user stamps)."""
    from latscope.load.arrivals import ClosedLoop
    from latscope.load.config import BenchConfig
    from latscope.load.lengths import LengthDist
    from latscope.load.workload import Workload

    options: dict[str, Any] = {
        "url": url,
        "model": "lab-model",
        "steps": (ClosedLoop(streams),),
        "workload": Workload.single(LengthDist.fixed(PROMPT_TOKENS), LengthDist.fixed(max_tokens), ignore_eos=True),
        "workers": 1,
        **bounds,
    }
    if stamps != "user":
        options["stamps"] = stamps
    return BenchConfig(**options)


def run_client(url: str, streams: int, seconds: float, max_tokens: int, stamps: str) -> dict[str, Any]:
    """The ``--run`` mode: one unrecorded run, then the measured one; returns its CPU, wall time and events."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from latscope.load.bench import bench_async
    from latscope.wire.loop import run

    def config(duration_s: float) -> Any:
        return bench_config(url, streams, max_tokens, stamps, duration_s=duration_s, warmup_s=WARMUP_S, drain_s=1.0)

    with tempfile.TemporaryDirectory(prefix="latscope-client-cpu-") as tmp:
        run(bench_async(config(PRIME_S), Path(tmp)))
    with tempfile.TemporaryDirectory(prefix="latscope-client-cpu-") as tmp:
        before, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
        run(bench_async(config(seconds), Path(tmp)))
        after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall0
        table = pq.read_table(Path(tmp) / "events.parquet", columns=["coalesced"])
        events = table.num_rows
        reads = events - int(pc.sum(table["coalesced"]).as_py() or 0)  # each read's first event is not coalesced
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "cpu_s": user + system,
        "user_s": user,
        "system_s": system,
        "wall_s": wall,
        "events": events,
        "reads": reads,
    }


def measure(src: Path | None, url: str, streams: int, step_ms: float, seconds: float, stamps: str) -> dict[str, Any]:
    """One run in a fresh process of ``src``'s latscope (this checkout's when None)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, "--run", url, str(streams), str(seconds), str(int(1000 / step_ms)), stamps]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="the other checkout's src directory")
    parser.add_argument("--levels", default="5000,20000", help="events/s levels of fidelity.py (default 5000,20000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds of each run (default 5)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each client per level (default 5)")
    parser.add_argument("--stamps", default="kernel", help="this checkout's stamps (default kernel)")
    parser.add_argument("--baseline-stamps", default="user", help="the baseline's stamps (default user)")
    parser.add_argument("--json", type=Path, help="also write every run here")
    parser.add_argument("--run", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        url, streams, seconds, max_tokens, stamps = args.run
        print(orjson.dumps(run_client(url, int(streams), float(seconds), int(max_tokens), stamps)).decode())
        return 0

    sys.path.insert(0, str(HERE))
    from fidelity import LEVELS, lab_args

    from latscope.lab.process import LabProcess

    clients: list[tuple[str, Path | None, str]] = [("this checkout", None, args.stamps)]
    if args.baseline is not None:
        if not (args.baseline / "latscope" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: no latscope package there (give the checkout's src directory)")
        clients.append((f"baseline ({args.baseline})", args.baseline.resolve(), args.baseline_stamps))
    levels = [int(level) for level in args.levels.split(",")]
    if unknown := [level for level in levels if level not in LEVELS]:
        parser.error(f"--levels: unknown {unknown}; known: {sorted(LEVELS)}")
    runs: list[dict[str, Any]] = []
    print(f"client CPU per event, the same lab for every client; {args.rounds} runs of {args.seconds:g} s each\n")
    columns = "CPU µs/event, median (range) | of which system | CPU share, median | events per read | runs"
    print(f"| events/s | client | stamps | {columns} |")
    print("|---:|---|---|---|---:|---:|---:|---:|")
    for level in levels:
        streams, step_ms = LEVELS[level]
        with LabProcess(truth=True, args=lab_args(step_ms, streams)) as lab:
            assert lab.url is not None
            for i in range(args.rounds):
                order = clients if i % 2 == 0 else clients[::-1]  # neither client always runs first
                for name, src, stamps in order:
                    r = measure(src, lab.url, streams, step_ms, args.seconds, stamps)
                    runs.append({"level": level, "client": name, "stamps": stamps, **r})
        for name, _, stamps in clients:
            mine = [r for r in runs if r["level"] == level and r["client"] == name]
            per_event = [r["cpu_s"] / r["events"] * 1e6 for r in mine]
            system = statistics.median(r["system_s"] / r["events"] * 1e6 for r in mine)
            share = statistics.median(r["cpu_s"] / r["wall_s"] for r in mine)
            per_read = statistics.median(r["events"] / r["reads"] for r in mine)
            print(
                f"| {level:,} | {name} | {stamps} | {statistics.median(per_event):.1f} "
                f"({min(per_event):.1f}–{max(per_event):.1f}) | {system:.1f} | {share:.1%} | {per_read:.2f} | "
                f"{len(mine)} |",
                flush=True,
            )
    if args.json:
        args.json.write_bytes(orjson.dumps(runs, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
