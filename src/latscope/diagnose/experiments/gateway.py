"""The gateway-queueing experiment: a step in offered rate, from a low rate to a burst, with short requests.

After a short pause (:data:`PAUSE_S`: a token bucket the earlier experiments drained refills), :data:`LOW_REQUESTS`
requests are sent :data:`LOW_INTERVAL_S` apart (the control), each on a connection of its own, then
:data:`HIGH_REQUESTS` at once on the same client: the burst finds those connections open (HTTP/1.1; HTTP/2 shares
one), so it does not make the server accept and handshake a burst of connections while it reads its requests.
Every request is a short prompt and :data:`MAX_TOKENS` tokens: about a second in all on loopback, and what each
request waited is read against what the server says it spent (:mod:`latscope.checks.gateway`).
"""

from __future__ import annotations

import asyncio

from latscope.checks.gateway import GatewayQueueEvidence
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.timeline.model import Timeline
from latscope.wire import Client

PROMPT_TOKENS = 8
MAX_TOKENS = 2
#: A pause before the step, s: a limiter's bucket drained by the previous experiments refills.
PAUSE_S = 0.5
LOW_REQUESTS = 4
#: The control's spacing, s: slower than a limiter meant for interactive use lets through without a queue.
LOW_INTERVAL_S = 0.15
HIGH_REQUESTS = 6


def planned_requests() -> int:
    """Requests this experiment sends."""
    return LOW_REQUESTS + HIGH_REQUESTS


async def run(ctx: Context, prior: Prior) -> GatewayQueueEvidence:
    """Run the step (see the module docstring)."""
    async with ctx.client(quickack=True, max_connections_per_origin=HIGH_REQUESTS) as client:
        await asyncio.sleep(PAUSE_S)
        low = await _paced(ctx, client, LOW_REQUESTS, LOW_INTERVAL_S, "low rate", new_connection=True)
        high = await _paced(ctx, client, HIGH_REQUESTS, 0.0, "burst")
    ids = tuple(request_id for _, request_id in high if request_id is not None)
    return GatewayQueueEvidence(
        LOW_INTERVAL_S * 1000.0, tuple(s for s, _ in low), tuple(s for s, _ in high), high_request_ids=ids
    )


async def _paced(
    ctx: Context, client: Client, count: int, interval_s: float, name: str, *, new_connection: bool = False
) -> list[tuple[RequestSample, str | None]]:
    """``count`` requests sent ``interval_s`` apart (0: at once), each with the server's request id; with
    ``new_connection`` each on a connection of its own."""

    async def one(index: int) -> tuple[RequestSample, str | None]:
        await asyncio.sleep(index * interval_s)
        timeline = Timeline()
        sample = await ctx.send(
            client,
            ctx.spec(PROMPT_TOKENS, MAX_TOKENS),
            label=f"{name} {index + 1}/{count}",
            new_connection=new_connection,
            timeline=timeline,
        )
        return sample, timeline.response_headers.get("x-request-id")

    return list(await asyncio.gather(*(one(i) for i in range(count))))


EXPERIMENT = Experiment(
    family="gateway",
    description="short requests at a low rate, then as many at once: does time before the server's work grow?",
    planned_requests=lambda ctx: planned_requests(),
    run=run,
)
