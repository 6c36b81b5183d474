"""What does the part writer cost the measuring process, per request and per event?

A load worker keeps every finished request and, a batch at a time, converts the batch into its two tables
(:func:`~latscope.runs.records.build_tables`, on the worker's event loop) and writes them to its part files (Parquet,
in a background thread that releases the GIL). Both take CPU from the process that stamps reads, during the
measurement. This benchmark times each on the same hand-built batches (streamed requests of ``--tokens`` tokens, one
read per event, a lab-like Server-Timing header) and prints CPU per request and per event, best of ``--repeat``:

* ``convert, user stamps`` — the conversion of a batch of user-stamped requests;
* ``convert, kernel stamps`` — the same requests as a kernel-stamped connection records them (each read also holds
  its user-space stamp, so each request gets its read delays: per event, and the median and p99 per request);
* ``write: part options`` — the two tables of a batch written as a part file is (``PART_WRITE_OPTIONS``);
* ``write: zstd, dictionaries, statistics`` — the same written as the final files are (``COMPRESSION`` and
  pyarrow's defaults), which is how part files were written before.

Usage::

    .venv/bin/python benchmarks/part_write.py                 # ~10 s
    .venv/bin/python benchmarks/part_write.py --batches 8 --tokens 100 --repeat 5
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # writer_stall
from writer_stall import make_batch

from latscope.runs.records import RequestContext, build_tables, prime_conversions
from latscope.runs.storage import COMPRESSION, PART_WRITE_OPTIONS, WRITER_REQUEST_ROWS
from latscope.timeline.model import Read, Timeline


def make_kernel_batch(n: int, tokens: int, *, kernel: bool) -> list[tuple[Timeline, RequestContext]]:
    """writer_stall's batch (``n`` finished streams of ``tokens`` tokens, one read per event, lab-like headers);
    ``kernel``: its reads kernel-stamped, each with a user-space stamp 20-80 µs later."""
    rows = make_batch(n, tokens)
    if kernel:
        for t, _ in rows:
            assert t.connection is not None
            t.connection.stamps = "kernel"
            t.reads = [Read(r.at_ns, r.nbytes, r.at_ns + 20_000 + (j * 7919) % 60_000) for j, r in enumerate(t.reads)]
    return rows


def best_cpu(work: Callable[[], object], repeat: int) -> float:
    """The least process CPU time (s) of ``repeat`` runs of ``work``."""
    best = float("inf")
    for _ in range(repeat):
        cpu0 = time.process_time()
        work()
        best = min(best, time.process_time() - cpu0)
    return best


def write_tables(tables: list[tuple[pa.Table, pa.Table]], options: dict[str, Any]) -> None:
    """Write every batch's two tables as row groups of two in-memory Parquet files."""
    requests = pq.ParquetWriter(io.BytesIO(), tables[0][0].schema, **options)
    events = pq.ParquetWriter(io.BytesIO(), tables[0][1].schema, **options)
    for req, ev in tables:
        requests.write_table(req)
        events.write_table(ev)
    requests.close()
    events.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=4, help="batches per run")
    parser.add_argument("--requests", type=int, default=WRITER_REQUEST_ROWS, help="requests per batch")
    parser.add_argument("--tokens", type=int, default=40, help="tokens (events) per request")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    prime_conversions()

    user = [make_kernel_batch(args.requests, args.tokens, kernel=False) for _ in range(args.batches)]
    kernel = [make_kernel_batch(args.requests, args.tokens, kernel=True) for _ in range(args.batches)]
    tables = [build_tables(batch) for batch in kernel]
    requests = args.batches * args.requests
    events = sum(t[1].num_rows for t in tables)
    rows = {
        "convert, user stamps": best_cpu(lambda: [build_tables(b) for b in user], args.repeat),
        "convert, kernel stamps": best_cpu(lambda: [build_tables(b) for b in kernel], args.repeat),
        "write: part options": best_cpu(lambda: write_tables(tables, PART_WRITE_OPTIONS), args.repeat),
        f"write: {COMPRESSION}, dictionaries, statistics": best_cpu(
            lambda: write_tables(tables, {"compression": COMPRESSION}), args.repeat
        ),
    }
    print(f"{requests} requests, {events} events ({args.tokens} tokens each), best of {args.repeat}, process CPU")
    print(f"| {'work':<40} | {'µs/request':>10} | {'µs/event':>8} |")
    print(f"|{'-' * 42}|{'-' * 11}:|{'-' * 9}:|")
    for name, cpu_s in rows.items():
        print(f"| {name:<40} | {cpu_s / requests * 1e6:>10.1f} | {cpu_s / events * 1e6:>8.3f} |")


if __name__ == "__main__":
    main()
