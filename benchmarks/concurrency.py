"""How many concurrent streams can one client hold while adding < 1 ms to each event? And at what memory?

latscope bench (closed loop, a worker process on uvloop: the CLI's path) holds ``C`` streams open against a server in
its own process that stamps every event with its send time (``latscope.sent_ns``, CLOCK_MONOTONIC); each event's
``client stamp − server send stamp`` is the delay the client adds. To look at concurrency rather than event rate,
the total event rate is held at ``--rate`` events/s at every ``C``. Two servers:

* ``lab`` — the lab with ``--truth``, decode step ``C ÷ rate`` s: every step sends one token to each of the ``C``
  streams at once, as a batching engine does. A burst of ``C`` events reaches the client in one instant, so the last
  one waits behind ``C − 1`` reads whatever the client: the delay measures burst absorption;
* ``phased`` — a minimal server process that gives each stream its own phase (stream ``i`` sends at
  ``phase_i + k·C/rate``), so events arrive evenly spread: the delay measures what holding ``C`` streams costs.

Reported per ``C``: streams open through the measurement, delay p50/p99/max over the measured events, worker memory
(peak RSS) and its growth per stream over a one-stream worker, client and server CPU, errors. The answer is the
largest ``C`` whose delay p99 stays under 1 ms.

Usage::

    .venv/bin/python benchmarks/concurrency.py                          # ~5 minutes
    .venv/bin/python benchmarks/concurrency.py --levels 100,1000 --sources phased --measure 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
from procstat import proc_cpu_s

from latscope.lab.process import LabProcess
from latscope.load.arrivals import ClosedLoop
from latscope.load.bench import run_bench
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workers import raise_fd_limit
from latscope.load.workload import Workload
from latscope.wire.loop import run as run_uvloop
from latscope.wire.target import Target

LEVELS = (100, 1_000, 2_500, 5_000, 10_000)
SOURCES = ("phased", "lab")
TARGET_P99_MS = 1.0

#: Connections the client opens per second here (pool + kernel + server accept); sizes the warm-up ramp.
RAMP_STREAMS_PER_S = 500


# --- the phased server ----------------------------------------------------------------------------------------------


_EVENT = (
    b'data: {"id":"p","object":"chat.completion.chunk","model":"lab-model","choices":[{"index":0,'
    b'"delta":{"content":" tok"},"finish_reason":null}],"latscope":{"sent_ns":%d}}\n\n'
)


class PhasedStream(asyncio.Protocol):
    """One keep-alive connection: each request streams ``max_tokens`` events, ``period_s`` apart, from a random phase,
    each stamped with its send time just before the write, chunked one event per chunk like the lab."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.buf = b""
        self.transport: Any = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        i = head.find(b"content-length:")
        length = int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0
        if len(self.buf) < end + 4 + length:
            return
        body = orjson.loads(self.buf[end + 4 : end + 4 + length] or b"{}")
        self.buf = self.buf[end + 4 + length :]
        self.task = asyncio.get_running_loop().create_task(self.stream(int(body.get("max_tokens") or 1)))

    async def stream(self, tokens: int) -> None:
        write = self.transport.write
        write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        start = time.monotonic() + random.random() * self.period_s
        for k in range(tokens):
            delay = start + k * self.period_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            event = _EVENT % time.monotonic_ns()
            write(b"%x\r\n%b\r\n" % (len(event), event))
        done = b"data: [DONE]\n\n"
        write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))


def phased_main(conn: Any, period_s: float) -> None:
    """Child process: serve phased streams on an ephemeral port; send the port; run until killed."""
    raise_fd_limit()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: PhasedStream(period_s), "127.0.0.1", 0, backlog=4096)
        conn.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    run_uvloop(serve())


@contextlib.contextmanager
def phased_server(period_s: float) -> Iterator[tuple[str, int]]:
    """``(base_url, pid)`` of a phased server process for the duration of the block."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=phased_main, args=(child, period_s), daemon=True)
    proc.start()
    try:
        port = parent.recv()
        assert proc.pid is not None
        yield f"http://127.0.0.1:{port}/v1", proc.pid
    finally:
        proc.kill()
        proc.join(5)


@contextlib.contextmanager
def lab_server(step_ms: float, streams: int) -> Iterator[tuple[str, int]]:
    """``(base_url, pid)`` of a lab process whose engine sends one token per stream every ``step_ms``."""
    args = [
        "--prefill-base-ms", "0", "--prefill-ms-per-token", "0", "--prefill-quadratic-ms", "0",
        "--decode-base-ms", f"{step_ms:g}", "--decode-ms-per-seq", "0",
        "--max-batch", str(streams * 2), "--kv-blocks", str(streams * 8),
    ]  # fmt: skip
    with LabProcess(truth=True, args=args) as lab:
        assert lab.url is not None and lab.pid is not None
        yield lab.url, lab.pid


# --- one level -------------------------------------------------------------------------------------------------------


def run_level(source: str, streams: int, rate: float, measure_s: float, baseline_mb: float) -> dict[str, Any]:
    period_s = streams / rate
    ramp_s = 1.0 + streams / RAMP_STREAMS_PER_S  # every stream is open (and has had its first tokens) by then
    total_s = ramp_s + measure_s
    tokens = math.ceil(total_s / period_s) + 2  # every stream stays open past the end of the measurement
    server = phased_server(period_s) if source == "phased" else lab_server(period_s * 1000, streams)
    with server as (url, server_pid), tempfile.TemporaryDirectory(prefix="latscope-conc-") as tmp:
        config = BenchConfig(
            target=Target.resolve(url),
            model="lab-model",
            steps=(ClosedLoop(streams),),
            workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(tokens), ignore_eos=True),
            duration_s=measure_s,
            warmup_s=ramp_s,
            drain_s=0.0,  # streams are cut when the measurement ends: they would run on for nothing
        )
        cpu0, wall0 = proc_cpu_s(server_pid), time.monotonic()
        result = run_bench(config, Path(tmp))
        server_cpu = (proc_cpu_s(server_pid) - cpu0) / (time.monotonic() - wall0)
        requests = pq.read_table(
            Path(tmp) / "requests.parquet", columns=["request_id", "started_at_ms", "ended_at_ms", "error_kind"]
        )
        events = pq.read_table(Path(tmp) / "events.parquet", columns=["request_id", "at_ms", "delay_ms"])
    rid = requests["request_id"].to_numpy()
    started = np.zeros(int(rid.max()) + 1)
    started[rid] = requests["started_at_ms"].to_numpy()
    at = started[events["request_id"].to_numpy()] + events["at_ms"].to_numpy()
    delay = events["delay_ms"].to_numpy(zero_copy_only=False)
    window = (at >= ramp_s * 1000) & (at < total_s * 1000) & ~np.isnan(delay)
    d = delay[window]
    # streams open through the window: started before it, and not ended (cut at the end, or finished) before its end
    ended = requests["ended_at_ms"].to_numpy(zero_copy_only=False)
    begun = requests["started_at_ms"].to_numpy() < ramp_s * 1000
    open_in_window = int((begun & (ended >= total_s * 1000 - 1)).sum())
    errors = [k for k in requests["error_kind"].to_pylist() if k is not None and k != "cancelled"]
    [step] = result.steps
    client = step.client
    rss = client.rss_max_mb if client and client.rss_max_mb else float("nan")
    return {
        "source": source,
        "streams": streams,
        "open": open_in_window,
        "period_ms": period_s * 1000,
        "events": int(d.size),
        "p50": float(np.percentile(d, 50)) if d.size else float("nan"),
        "p99": float(np.percentile(d, 99)) if d.size else float("nan"),
        "max": float(d.max()) if d.size else float("nan"),
        "rss_mb": rss,
        "kb_per_stream": (rss - baseline_mb) * 1024 / streams,
        "client_cpu": client.loop_cpu_mean if client and client.loop_cpu_mean is not None else float("nan"),
        "loop_lag_max": client.loop_lag_ms.max if client and client.loop_lag_ms else float("nan"),
        "machine_busy": client.machine_busy_mean if client and client.machine_busy_mean is not None else float("nan"),
        "server_cpu": server_cpu,
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default=",".join(str(c) for c in LEVELS))
    parser.add_argument("--sources", default=",".join(SOURCES), help="phased, lab, or both")
    parser.add_argument("--rate", type=float, default=2_000.0, help="total events/s at every level (default 2000)")
    parser.add_argument("--measure", type=float, default=6.0, help="measured seconds per level")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",") if c]
    sources = [s for s in args.sources.split(",") if s]
    base = run_level("phased", 1, 20.0, 2.0, 0.0)["rss_mb"]  # a one-stream worker: the memory every level adds to
    rows: list[dict[str, Any]] = []
    print(
        f"# concurrent streams ({os.cpu_count()} cores; server in its own process; {args.rate:,.0f} events/s total "
        f"at every level; one-stream worker RSS {base:.0f} MiB)\n"
    )
    print(
        "| server | streams | open through window | events/stream/s | events | delay p50 ms | p99 ms | max ms "
        "| worker RSS MiB | KiB/stream | client CPU | server CPU | loop lag max ms | machine busy | errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for source in sources:
        for streams in levels:
            r = run_level(source, streams, args.rate, args.measure, base)
            rows.append(r)
            kinds = f" ({', '.join(r['error_kinds'])})" if r["error_kinds"] else ""
            print(
                f"| {source} | {streams:,} | {r['open']:,} | {1000 / r['period_ms']:.2f} | {r['events']:,} | "
                f"{r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.2f} | {r['rss_mb']:.0f} | "
                f"{r['kb_per_stream']:.1f} | {r['client_cpu']:.0%} | {r['server_cpu']:.0%} | "
                f"{r['loop_lag_max']:.1f} | {r['machine_busy']:.0%} | {r['errors']}{kinds} |",
                flush=True,
            )
    print()
    for source in sources:
        good = [
            r
            for r in rows
            if r["source"] == source
            and r["p99"] < TARGET_P99_MS
            and r["errors"] == 0
            and r["open"] >= 0.99 * r["streams"]
        ]
        if good:
            best = max(good, key=lambda r: r["streams"])
            print(
                f"- {source}: largest concurrency with delay p99 < {TARGET_P99_MS:g} ms: "
                f"{best['streams']:,} streams (p99 {best['p99']:.3f} ms, worker RSS {best['rss_mb']:.0f} MiB); "
                f"target 10,000: {'met' if best['streams'] >= 10_000 else 'MISSED'}"
            )
        else:
            print(f"- {source}: no level kept delay p99 under {TARGET_P99_MS:g} ms")
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
