"""How fast does the tuned lab stream? Tokens per second from one lab process (one core) to a client.

The lab runs in a child process (``LabProcess``, uvloop, zero-cost engine: no simulated GPU time, so every
microsecond spent is the lab's own HTTP, scheduling and writing work). The client runs here, on the other core.

    .venv/bin/python benchmarks/lab_throughput.py                   # raw h11 client, concurrency 1 4 16 64
    .venv/bin/python benchmarks/lab_throughput.py --client wire     # the measuring client (latscope.wire)
    .venv/bin/python benchmarks/lab_throughput.py -c 1 -c 8 --tokens 100000

Columns: concurrent streams; wall tokens/s; the lab's CPU time per token (from /proc, so other processes competing
for the cores do not distort it) and the tokens/s one fully busy lab core gives at that cost; events per socket read
on the client side (1 = the client keeps up with every write; more = the kernel gathered writes while the client was
busy); client CPU %. Target: ≥ 50 000 tokens/s per lab core.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import click
import h11
import orjson
from rich.console import Console
from rich.table import Table

from latscope.lab.process import LabProcess

TARGET_TOKENS_PER_S = 50_000


@dataclass
class Run:
    concurrency: int
    tokens: int
    events: int
    reads: int
    wall_s: float
    lab_cpu_s: float | None
    client_cpu_s: float
    errors: int


def _cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process, s (Linux /proc); None elsewhere."""
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        return None
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _RawStream(asyncio.Protocol):
    """One streamed request over a raw connection: h11 parses the response head; the body is only scanned (event
    terminators counted, the usage chunk read), so the client costs far less per event than the lab."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.request = request
        self.done = done
        self.conn: h11.Connection | None = h11.Connection(h11.CLIENT)
        self.events = 0
        self.reads = 0
        self.tokens = 0
        self.failed = False
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if self.conn is not None:  # still reading the head
            self.conn.receive_data(data)
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                return
            assert isinstance(event, h11.Response)
            self.failed = event.status_code != 200
            data = self.conn.trailing_data[0]
            self.conn = None
        # Each event starts with "data: "; a marker split across two reads is found in the carried tail.
        seen = self._tail + data
        self.events += seen.count(b"data: ") - self._tail.count(b"data: ")
        self._tail = seen[-16:]
        if b'"completion_tokens":' in data:
            usage = data[data.index(b'"completion_tokens":') + 20 :]
            self.tokens = int(usage[: usage.index(b",")])
        if seen.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the chunked coding
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.failed = True
            self.done.set_result(None)


async def _raw_request(host: str, port: int, max_tokens: int) -> tuple[int, int, int, bool]:
    body = orjson.dumps(
        {
            "model": "lab-model",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%b" % (host.encode(), len(body), body)
    )
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    _, protocol = await loop.create_connection(lambda: _RawStream(request, done), host, port)
    await done
    return protocol.tokens, protocol.events, protocol.reads, protocol.failed


async def _wire_requests(url: str, concurrency: int, max_tokens: int) -> list[tuple[int, int, int, bool]]:
    from latscope.dialects.openai import chat_request
    from latscope.wire import Client

    async with Client() as client:
        timelines = await asyncio.gather(
            *(client.request(chat_request("lab-model", "hi", max_tokens), url) for _ in range(concurrency))
        )
    return [
        ((t.usage.completion_tokens or 0) if t.usage else 0, len(t.events), len(t.reads), t.error is not None)
        for t in timelines
    ]


async def measure(url: str, pid: int, concurrency: int, total_tokens: int, client: str) -> Run:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    per_request = max(1, total_tokens // concurrency)
    await _raw_request(host, int(port), 50)  # warm-up: imports, first connection
    lab_before = _cpu_seconds(pid)
    client_before = os.times()
    started = time.perf_counter()
    if client == "wire":
        results = await _wire_requests(url, concurrency, per_request)
    else:
        results = await asyncio.gather(*(_raw_request(host, int(port), per_request) for _ in range(concurrency)))
    wall = time.perf_counter() - started
    client_after = os.times()
    lab_after = _cpu_seconds(pid)
    return Run(
        concurrency=concurrency,
        tokens=sum(r[0] for r in results),
        events=sum(r[1] for r in results),
        reads=sum(r[2] for r in results),
        wall_s=wall,
        lab_cpu_s=None if lab_before is None or lab_after is None else lab_after - lab_before,
        client_cpu_s=(client_after.user - client_before.user) + (client_after.system - client_before.system),
        errors=sum(1 for r in results if r[3]),
    )


def _table(runs: list[Run], client: str) -> Table:
    table = Table(title=f"tuned lab, zero-cost engine, {client} client", title_justify="left")
    for name in ("streams", "tokens/s", "lab µs/token", "tokens/s/core", "events/read", "client CPU", "errors"):
        table.add_column(name, justify="right")
    for run in runs:
        per_core = "-" if not run.lab_cpu_s else f"{run.tokens / run.lab_cpu_s:,.0f}"
        cost = "-" if not run.lab_cpu_s or not run.tokens else f"{run.lab_cpu_s / run.tokens * 1e6:.1f}"
        table.add_row(
            str(run.concurrency),
            f"{run.tokens / run.wall_s:,.0f}",
            cost,
            per_core,
            f"{run.events / max(1, run.reads):.1f}",
            f"{100 * run.client_cpu_s / run.wall_s:.0f} %",
            str(run.errors),
        )
    return table


@click.command()
@click.option(
    "-c",
    "--concurrency",
    "concurrencies",
    multiple=True,
    type=int,
    default=(1, 4, 16, 64),
    show_default=True,
    help="Concurrent streams (repeatable).",
)
@click.option("--tokens", default=80_000, show_default=True, help="Tokens per run, split over the streams.")
@click.option(
    "--client",
    type=click.Choice(["raw", "wire"]),
    default="raw",
    show_default=True,
    help="raw: h11 and an event count (the lab is the bottleneck); wire: latscope's measuring client.",
)
def main(concurrencies: tuple[int, ...], tokens: int, client: str) -> None:
    """Stream from a tuned lab as fast as it goes and print tokens/s per concurrency."""
    console = Console()
    console.width = max(console.width, 100)  # the table needs 100 columns; narrower pipes would truncate headers
    with LabProcess(zero_cost=True) as lab:
        assert lab.url is not None and lab.pid is not None
        url, pid = lab.url, lab.pid

        async def all_runs() -> list[Run]:
            return [await measure(url, pid, c, tokens, client) for c in concurrencies]

        try:
            import uvloop

            runs = uvloop.run(all_runs())
        except ImportError:
            runs = asyncio.run(all_runs())
    console.print(_table(runs, client))
    best = max((r.tokens / r.lab_cpu_s for r in runs if r.lab_cpu_s), default=None)
    if best is not None:
        verdict = "[green]meets[/]" if best >= TARGET_TOKENS_PER_S else "[red]misses[/]"
        console.print(f"best: {best:,.0f} tokens/s per lab core — {verdict} the {TARGET_TOKENS_PER_S:,} target")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None and load > (os.cpu_count() or 1) - 0.5:
        console.print(
            f"[yellow]load average {load:.1f} on {os.cpu_count()} cores: other processes competed for "
            "the CPU, so wall tokens/s understate the lab (the per-core column less so)[/]"
        )


if __name__ == "__main__":
    main()
