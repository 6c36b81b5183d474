"""Stream decoder CPU cost per event, for each dialect, without the HTTP client: bytes in, chunks out.

Each dialect's stream of ``--events`` tokens is built as the client-overhead benchmark builds it (the lab's shapes,
``client_overhead.dialect_parts``; OpenAI chat: its ``build_stream``), and its body is fed to a fresh decoder of
that dialect in reads of ``--read`` bytes: large reads, as a client sees when the stream arrives faster than it is
read (the client-overhead benchmark's case), so the cost is per event, not per read (``--read 0``: one event per
read, as tokens arrive from a server that writes them one by one). The SSE (or NDJSON) framing is
part of the decoder's cost, and the chunks are kept, as a recording keeps them; Python's garbage collector is off
while a decoder runs (``--gc`` leaves it on: its full collections then walk the chunks kept so far). A run times
every dialect once, in turn; the table gives, per dialect, the median and the spread (min-max) of ``--runs`` runs,
and its ratio to OpenAI chat's time measured in the same run (median and spread): on a machine shared with other
work, compare the ratios.

Run: ``.venv/bin/python benchmarks/decoders.py [--events 100000] [--runs 5] [--read 65536] [--gc]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_overhead import DIALECT_ROWS, build_stream, dialect_parts

from latscope.dialects import get_dialect

BASELINE = "openai.chat"
DIALECTS = (BASELINE, *DIALECT_ROWS)


def events_of(dialect: str, events: int) -> list[bytes]:
    """The response body (no HTTP head, no chunked framing) of a stream of ``events`` tokens in ``dialect``, event by
    event."""
    if dialect == BASELINE:
        body = build_stream(events, "length").partition(b"\r\n\r\n")[2]
        return [event + b"\n\n" for event in body.split(b"\n\n") if event]
    return dialect_parts(dialect, events)[1]


def body_of(dialect: str, events: int) -> bytes:
    """The response body of a stream of ``events`` tokens in ``dialect``."""
    return b"".join(events_of(dialect, events))


def decode_ns(dialect: str, parts: list[bytes], read: int, events: int, collect: bool) -> float:
    """ns per token of decoding the body made of ``parts`` in reads of ``read`` bytes, or one event per read when
    ``read`` is 0 (the tokens counted, as a check); ``collect``: with the garbage collector on."""
    decoder = get_dialect(dialect).new_decoder()
    body = b"".join(parts)
    reads = [body[i : i + read] for i in range(0, len(body), read)] if read else parts
    gc.collect()
    if not collect:
        gc.disable()
    try:
        start = time.perf_counter_ns()
        chunks = [chunk for data in reads for chunk in decoder.feed(data)]
        chunks += decoder.close()
        elapsed = time.perf_counter_ns() - start
    finally:
        gc.enable()
    tokens = sum(chunk.tokens for chunk in chunks)
    assert tokens == events, (dialect, tokens, events)
    return elapsed / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--read", type=int, default=65536, help="bytes per feed (default: 64 KiB; 0: one event)")
    parser.add_argument("--gc", action="store_true", help="leave the garbage collector on while decoding")
    args = parser.parse_args()

    bodies = {dialect: events_of(dialect, args.events) for dialect in DIALECTS}
    for dialect in DIALECTS:  # warm-up: imports, caches
        decode_ns(dialect, bodies[dialect], args.read, args.events, args.gc)
    times: dict[str, list[float]] = {dialect: [] for dialect in DIALECTS}
    for _ in range(args.runs):
        for dialect in DIALECTS:  # interleaved, so a noisy moment hits every dialect alike
            times[dialect].append(decode_ns(dialect, bodies[dialect], args.read, args.events, args.gc))

    collector = "GC on" if args.gc else "GC off"
    reads = f"reads of {args.read} bytes" if args.read else "one event per read"
    print(f"{args.events} events, {reads}, {collector}, {args.runs} runs (noisy when shared)")
    print(f"{'dialect':<20} {'ns/event median':>16} {'min-max':>14} {'÷ openai.chat':>14} {'min-max':>12}")
    for dialect in DIALECTS:
        ns = times[dialect]
        ratios = [a / b for a, b in zip(ns, times[BASELINE], strict=True)]
        print(
            f"{dialect:<20} {statistics.median(ns):>16,.0f} {min(ns):>7,.0f}-{max(ns):<6,.0f} "
            f"{statistics.median(ratios):>14.2f} {min(ratios):>5.2f}-{max(ratios):<5.2f}"
        )


if __name__ == "__main__":
    main()
