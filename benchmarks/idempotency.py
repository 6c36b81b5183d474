"""What does deduplicating a request by its Idempotency-Key cost? The lab's in-memory store against Redis.

The source article (reference/source-article.txt) measures a Redis ``SET NX`` dedupe at 2.7 ms per request (against
18.4 ms for a database unique index). This benchmark times the lab's two stores on this machine, one request at a
time (latency, not throughput), ``--ops`` operations per run, ``--runs`` runs:

- ``claim (SET NX)``: claiming a new key — for Redis one ``SET NX PX``, the article's operation;
- ``claim + store answer``: what an executed request pays in all: the claim before it runs and storing its answer
  (a 2 KB response) after;
- ``replay lookup``: a duplicate of a finished request: the failed claim and reading the stored answer;
- ``through the lab``: the client-side time of a non-streamed request with a key minus one without, on an in-process
  zero-cost lab (the key's whole cost as a client sees it: claim, recording, storing, on one event loop).

Redis is a private ``redis-server`` started on a free port (Debian's package; ``--redis URL`` uses another), reached
over loopback TCP, so its figures are a round trip on this host plus Redis's own work: a Redis on another host adds
the network's round trip to each.

    PYTHONPATH=src:. .venv/bin/python benchmarks/idempotency.py [--ops 500] [--runs 5] [--redis redis://host:port/0]

Columns: median and p90 over all operations of all runs (ms), and the spread of the per-run medians.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import click
import httpx
from rich.console import Console
from rich.table import Table
from tests.lab.rawhttp import chat_body
from tests.support.redis_server import RedisServer

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.idempotency import MemoryStore, open_store
from latscope.lab.idemstore import IdempotencyStore, StoredAnswer

#: The article's figure for a Redis SET NX dedupe, ms.
ARTICLE_SET_NX_MS = 2.7
#: The size of the answer stored per request: a non-streamed chat answer of a few hundred tokens.
ANSWER_BYTES = 2048
LEASE_S = 600.0


@dataclass
class Samples:
    """Per-operation times (ms) of each run."""

    runs: list[list[float]]

    @property
    def all(self) -> list[float]:
        return [x for run in self.runs for x in run]

    def median(self) -> float:
        return statistics.median(self.all)

    def p90(self) -> float:
        return statistics.quantiles(self.all, n=10)[-1]

    def run_medians(self) -> tuple[float, float]:
        medians = [statistics.median(run) for run in self.runs]
        return min(medians), max(medians)


def answer(fingerprint: str) -> StoredAnswer:
    return StoredAnswer(200, ((b"content-type", b"application/json"),), b"x" * ANSWER_BYTES, False, "id", fingerprint)


async def timed(ops: int, operation: Callable[[int], Awaitable[None]]) -> list[float]:
    times = []
    for n in range(ops):
        started = time.perf_counter_ns()
        await operation(n)
        times.append((time.perf_counter_ns() - started) / 1e6)
    return times


async def store_runs(store: IdempotencyStore, ops: int, runs: int) -> dict[str, Samples]:
    """The three store operations, ``runs`` × ``ops`` each, on fresh keys per run."""
    results: dict[str, Samples] = {"claim": Samples([]), "claim+store": Samples([]), "replay": Samples([])}
    for _ in range(runs):
        prefix = secrets.token_hex(4)

        async def claim(n: int, prefix: str = prefix) -> None:
            assert (await store.claim(f"bench:{prefix}:a{n}", "t", "f", LEASE_S)).claimed

        async def claim_and_store(n: int, prefix: str = prefix) -> None:
            key = f"bench:{prefix}:b{n}"
            assert (await store.claim(key, "t", "f", LEASE_S)).claimed
            await store.complete(key, "t", answer("f"), LEASE_S)

        async def replay(n: int, prefix: str = prefix) -> None:
            assert (await store.claim(f"bench:{prefix}:b{n}", "u", "f", LEASE_S)).answer is not None

        results["claim"].runs.append(await timed(ops, claim))
        results["claim+store"].runs.append(await timed(ops, claim_and_store))
        results["replay"].runs.append(await timed(ops, replay))
    return results


async def lab_runs(spec: str, ops: int, runs: int) -> Samples:
    """Client-side time of a keyed request minus an unkeyed one, pairs interleaved, on a zero-cost lab."""
    differences: list[list[float]] = []
    async with (
        Lab(cost=CostModel.zero(), idempotency_store=spec, records_max=100) as lab,
        httpx.AsyncClient(base_url=lab.origin) as client,
    ):
        body = chat_body(4)
        headers = {"content-type": "application/json"}
        await client.post("/v1/chat/completions", content=body, headers=headers)  # the connection, warmed

        async def request(key: str | None) -> float:
            started = time.perf_counter_ns()
            extra = {"idempotency-key": key} if key is not None else {}
            response = await client.post("/v1/chat/completions", content=body, headers={**headers, **extra})
            assert response.status_code == 200 and "idempotent-replayed" not in response.headers
            return (time.perf_counter_ns() - started) / 1e6

        for _ in range(runs):
            prefix = secrets.token_hex(4)
            keyed, plain = [], []
            for n in range(ops):
                plain.append(await request(None))
                keyed.append(await request(f"bench-{prefix}-{n}"))
            # paired difference of sorted samples: the cost where it shows, without one outlier deciding it
            differences.append([k - p for k, p in zip(sorted(keyed), sorted(plain), strict=True)])
    return Samples(differences)


@contextlib.contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    if given is not None:
        yield given
        return
    server = RedisServer()
    try:
        server.start()
        yield server.url
    finally:
        server.remove()


async def measure(redis: str, ops: int, runs: int) -> list[tuple[str, str, Samples]]:
    rows: list[tuple[str, str, Samples]] = []
    for name, store in (("memory", MemoryStore()), ("redis", open_store(redis))):
        await store.check()
        try:
            results = await store_runs(store, ops, runs)
        finally:
            await store.close()
        rows += [
            (name, "claim (SET NX)" if name == "redis" else "claim", results["claim"]),
            (name, "claim + store answer", results["claim+store"]),
            (name, "replay lookup", results["replay"]),
        ]
        rows.append(
            (name, "through the lab (keyed − plain)", await lab_runs(name if name == "memory" else redis, ops, runs))
        )
    return rows


@click.command()
@click.option("--ops", default=500, show_default=True, help="Operations per run.")
@click.option("--runs", default=5, show_default=True, help="Runs.")
@click.option("--redis", "redis", default=None, help="Use this Redis instead of starting a private redis-server.")
def main(ops: int, runs: int, redis: str | None) -> None:
    console = Console()
    with redis_url(redis) as url:
        rows = asyncio.run(measure(url, ops, runs))
    table = Table(
        title=f"Idempotency-Key dedupe cost per request ({runs} runs × {ops} operations, one at a time)",
        title_justify="left",
        caption=f"the article's Redis SET NX figure: {ARTICLE_SET_NX_MS} ms",
        caption_justify="left",
    )
    for column in ("store", "operation"):
        table.add_column(column, no_wrap=True)
    for column in ("median ms", "p90 ms", "run medians ms", "× article"):
        table.add_column(column, justify="right")
    for store, operation, samples in rows:
        low, high = samples.run_medians()
        table.add_row(
            store,
            operation,
            f"{samples.median():.3f}",
            f"{samples.p90():.3f}",
            f"{low:.3f}–{high:.3f}",
            f"{samples.median() / ARTICLE_SET_NX_MS:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
