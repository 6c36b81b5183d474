"""The connection experiment: DNS lookups, reuse, TLS resumption, ALPN, and what HTTP/1.1 costs under concurrency.

1. Three short requests one after another on one client pool: does the second reuse the first's connection? Then,
   after the pool sat idle for a pause like a user's between two prompts, one more: did the connection survive it
   (a keep-alive timeout shorter than a client's pause closes it)?
2. Further requests forced onto new connections: every new connection's dns + connect + tls is the measured cost of
   a fresh connection; over TLS each offers the session saved from the first: is it resumed? Each also resolved
   the target's name by itself (its dns phase, next to its own TCP connect): the ``slow-dns`` evidence, at no extra
   request or lookup (none for an IP-literal target).
3. Over TLS, when ALPN did not select h2: twelve requests at once through a pool of six connections (a browser's
   per-host limit), whose queued half waits for a free connection: what the missing HTTP/2 costs.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from latscope.checks.connection import ConcurrencyEvidence, ConnectionEvidence
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.wire.connection import is_ip_literal
from latscope.wire.pool import BROWSER_CONNECTIONS_PER_HOST

SEQUENTIAL_REQUESTS = 3
#: Idle pauses (s) before a further request on the same pool: shorter than a user's pause between prompts (seconds),
#: longer than any keep-alive a server means to keep (nginx's default is 75 s; uvicorn's 5 s; gunicorn's 2 s).
IDLE_PAUSES_S = (0.5, 2.0)
IDLE_PAUSES_S_QUICK = (1.0,)
FRESH_REQUESTS = 4
#: Quick runs keep four: the TLS check costs a full handshake by the lower quartile of these alone.
FRESH_REQUESTS_QUICK = 4
#: Twice a browser's connections per host (:data:`~latscope.wire.pool.BROWSER_CONNECTIONS_PER_HOST`): half queue.
CONCURRENT_REQUESTS = 2 * BROWSER_CONNECTIONS_PER_HOST
#: Bursts of concurrent requests: the quietest counts (a host stall during one burst delays all its requests).
CONCURRENT_ROUNDS = 3
PROMPT_TOKENS = 16
MAX_TOKENS = 4
CONCURRENT_MAX_TOKENS = 8
#: What the client offers by ALPN over TLS (latscope.wire offers h2 first when HTTP/2 is on, its default).
OFFERED_ALPN = ("h2", "http/1.1")


def planned_requests(quick: bool, tls: bool) -> int:
    """Requests this experiment sends at most."""
    idle = len(IDLE_PAUSES_S_QUICK if quick else IDLE_PAUSES_S)
    fresh = FRESH_REQUESTS_QUICK if quick else FRESH_REQUESTS
    if not tls:
        return SEQUENTIAL_REQUESTS + idle + fresh
    return SEQUENTIAL_REQUESTS + idle + fresh + CONCURRENT_ROUNDS * CONCURRENT_REQUESTS


async def run(ctx: Context, prior: Prior) -> ConnectionEvidence:
    """Run the connection experiment (see the module docstring)."""
    fresh: list[RequestSample] = []
    idle: list[tuple[float, RequestSample]] = []
    async with ctx.client() as client:
        sequential = await ctx.send_series(client, SEQUENTIAL_REQUESTS, PROMPT_TOKENS, MAX_TOKENS, "sequential")
        if sequential[-1].ok:
            for pause in IDLE_PAUSES_S_QUICK if ctx.quick else IDLE_PAUSES_S:
                await asyncio.sleep(pause)
                sample = await ctx.send(client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label=f"after {pause:g} s idle")
                idle.append((pause, sample))
        if sequential[0].ok:
            # new connections on purpose: their setup is the measured cost of a fresh connection (and, over TLS,
            # each offers the saved session)
            count = FRESH_REQUESTS_QUICK if ctx.quick else FRESH_REQUESTS
            fresh = await ctx.send_series(
                client, count, PROMPT_TOKENS, MAX_TOKENS, "new connection", new_connection=True
            )
    concurrency = None
    negotiated = next((s for s in (*sequential, *fresh) if s.ok and s.http_version is not None), None)
    if ctx.tls and negotiated is not None and negotiated.http_version != "HTTP/2":
        bursts: list[tuple[RequestSample, ...]] = []
        for burst in range(CONCURRENT_ROUNDS):
            # a fresh pool per burst: every burst pays the same connection setup
            async with ctx.client(max_connections_per_origin=BROWSER_CONNECTIONS_PER_HOST) as client:
                samples = await asyncio.gather(
                    *(
                        ctx.send(
                            client,
                            ctx.spec(PROMPT_TOKENS, CONCURRENT_MAX_TOKENS),
                            label=f"burst {burst + 1} request {index + 1}/{CONCURRENT_REQUESTS}",
                        )
                        for index in range(CONCURRENT_REQUESTS)
                    )
                )
            bursts.append(tuple(samples))
        concurrency = ConcurrencyEvidence(BROWSER_CONNECTIONS_PER_HOST, tuple(bursts))
    host = urlsplit(ctx.base_url).hostname or ""
    return ConnectionEvidence(
        tls=ctx.tls,
        sequential=tuple(sequential),
        fresh=tuple(fresh),
        offered_alpn=OFFERED_ALPN if ctx.tls else (),
        concurrency=concurrency,
        idle=tuple(idle),
        host=host,
        host_is_ip=is_ip_literal(host),
    )


EXPERIMENT = Experiment(
    family="connection",
    description="DNS lookups, reuse, TLS resumption, ALPN, HTTP/1.1 under concurrency",
    planned_requests=lambda ctx: planned_requests(ctx.quick, ctx.tls),
    run=run,
)
