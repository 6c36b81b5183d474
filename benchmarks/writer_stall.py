"""How late does the event loop run while the part writer converts finished requests?

A load worker's loop stamps every read and fires every open-loop arrival; whatever else holds the loop (or the GIL)
makes those stamps and arrivals late. This benchmark hands a
:class:`~latscope.runs.storage.PartWriter` ``--requests`` finished streamed requests (hand-built timelines with a
lab-like Server-Timing header, so the server-signal join runs as it does in a run) while a probe on the same uvloop
loop sleeps 1 ms at a time and records how late each wake-up came. Rows:

* ``writer (on the loop)`` — what a worker does: the requests end one per turn of the loop and the writer's task
  converts its batches (``WRITER_EVENT_ROWS`` events or ``WRITER_REQUEST_ROWS`` requests) a slice at a time (the
  wall time includes the turns that add the requests);
* ``reference: converted in a thread`` — the same conversion (``build_tables``) in a second thread, as the writer did
  before (one batch of up to 8,192 requests): a Python thread holding the GIL keeps the loop's thread waiting for the
  interpreter's switch interval (5 ms) at every wake-up;
* ``idle`` — the probe alone: the machine's own timer lateness.

Columns: the conversion's wall time, and the probe's lateness p50 / p99 / max over the wake-ups during it. Each row
runs ``--repeat`` times; the table shows the lowest and highest of each figure.

Usage::

    .venv/bin/python benchmarks/writer_stall.py                 # ~10 s
    .venv/bin/python benchmarks/writer_stall.py --requests 4000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.load_timelines

from tests.support.load_timelines import MS, make_timeline

from latscope.runs.records import RequestContext, build_tables, prime_conversions
from latscope.runs.storage import PartWriter
from latscope.timeline.model import Timeline
from latscope.wire.loop import run

SERVER_TIMING = "parse;dur=0.004, validate;dur=0.027, queue;dur=0.051, prefill;dur=0.046"


def make_batch(n: int, tokens: int) -> list[tuple[Timeline, RequestContext]]:
    """``n`` finished streams of ``tokens`` tokens each, with the headers a lab response carries."""
    rows = []
    for i in range(n):
        t = make_timeline(start_ns=10_000 * MS + i * MS, gaps_ms=[5.0] * (tokens - 1))
        t.response_headers = {
            "content-type": "text/event-stream",
            "server-timing": SERVER_TIMING,
            "x-request-id": f"chatcmpl-{i:024x}",
        }
        rows.append((t, RequestContext(0, i, 0, "chat", False, 10_000 * MS)))
    return rows


async def probe_while(work: Callable[[], Coroutine[Any, Any, None]]) -> tuple[float, list[float]]:
    """Run ``work`` while a probe sleeps 1 ms at a time; the work's wall ms and each wake-up's lateness in ms."""
    lates: list[float] = []
    done = False

    async def probe() -> None:
        while not done:
            due = time.monotonic_ns() + 1_000_000
            await asyncio.sleep(0.001)
            lates.append((time.monotonic_ns() - due) / 1e6)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0.01)
    lates.clear()
    began = time.perf_counter()
    await work()
    wall = (time.perf_counter() - began) * 1e3
    done = True
    await task
    return wall, lates


def on_the_loop(n: int, tokens: int) -> Callable[[], Coroutine[Any, Any, None]]:
    writer = PartWriter(Path(tempfile.gettempdir()), 0, 0, sink=lambda r, e: None)
    batch = make_batch(n, tokens)[::-1]

    async def work() -> None:
        while batch:
            writer.add(*batch.pop())  # one request ends per turn of the loop, as in a run; the writer holds it alone
            await asyncio.sleep(0)
        writer._flush()  # the last, partial batch: what close() would do at the end of the step
        while writer.converting:
            await asyncio.sleep(0)
        writer.close()

    return work


def in_a_thread(n: int, tokens: int) -> Callable[[], Coroutine[Any, Any, None]]:
    batch = make_batch(n, tokens)

    def convert() -> None:
        build_tables(batch)
        batch.clear()  # the timelines are released in this thread too, as the writer's thread did

    async def work() -> None:
        with ThreadPoolExecutor(max_workers=1) as pool:
            await asyncio.wrap_future(pool.submit(convert))

    return work


def idle(n: int, tokens: int) -> Callable[[], Coroutine[Any, Any, None]]:
    async def work() -> None:
        await asyncio.sleep(0.15)

    return work


def span(values: list[float], fmt: str = ".3f") -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if format(low, fmt) == format(high, fmt) else f"{low:{fmt}}–{high:{fmt}}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="finished requests to convert")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per request")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    prime_conversions()
    gc.collect()
    gc.freeze()
    gc.disable()  # as a worker runs its step (latscope.quietgc)
    rows = {"writer (on the loop)": on_the_loop, "reference: converted in a thread": in_a_thread, "idle": idle}
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in rows}
    for _ in range(args.repeat):
        for name, make in rows.items():
            wall, lates = run(probe_while(make(args.requests, args.tokens)))
            a = np.array(lates)
            results[name].append((wall, float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max())))
    print(
        f"# event-loop lateness while {args.requests:,} finished requests × {args.tokens} tokens are converted "
        f"({args.repeat} runs, lowest–highest)\n"
    )
    print("| conversion | wall ms | probe late p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for name, rs in results.items():
        wall = "–" if name == "idle" else span([r[0] for r in rs], ".0f")
        print(
            f"| {name} | {wall} | {span([r[1] for r in rs])} | {span([r[2] for r in rs])} | "
            f"{span([r[3] for r in rs])} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
