"""The rate-limit probe: a handful of short requests back to back, stopping at the first refusal.

It runs after every other experiment, so its evidence also holds every rate-limit refusal the run met before it
(:attr:`~latscope.diagnose.context.Context.rate_limited`): a diagnosis already sends a few hundred requests, and a
limiter that refused any of them is found without sending more. The probe itself never hammers: at most
:data:`PROBE_REQUESTS` requests of a short prompt and one token each, on one connection, one after another, and it
stops at the first refusal (429, or 503 with ``Retry-After``).

A refusal that says neither when to retry (``Retry-After``) nor when the quota resets leaves its cost unknown, and
many limiters say nothing (nginx's ``limit_req``, a gateway's router). Then the probe measures the wait itself: it
sends the same short request again :data:`RECOVERY_FIRST_WAIT_S` after the refusal, then at doubling intervals, at
most :data:`RECOVERY_TRIES` times, and stops at the first one admitted: the limiter let requests through again
between the last refused try and that one.
"""

from __future__ import annotations

import asyncio
import time

from latscope.checks.ratelimit import RateLimitEvidence, RecoveryTry
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.wire import Client

#: Requests the probe sends at most: a burst that any limiter meant for interactive use admits, so a refusal of it
#: means the quota was already spent (by this run or by the key's other users).
PROBE_REQUESTS = 6
PROMPT_TOKENS = 8
MAX_TOKENS = 1
#: The first retry after a refusal that named no wait, s; each later one waits twice as long as the one before.
RECOVERY_FIRST_WAIT_S = 0.05
#: Retries at most: 50 ms doubling seven times reaches 3.2 s, 6.35 s after the refusal in all, past a per-second
#: limiter's window; a per-minute one is then known to hold a client at least that long.
RECOVERY_TRIES = 7


async def run(ctx: Context, prior: Prior) -> RateLimitEvidence:
    """Run the probe (see the module docstring)."""
    probe: list[RequestSample] = []
    recovery: tuple[RecoveryTry, ...] = ()
    async with ctx.client() as client:
        for index in range(PROBE_REQUESTS):
            seen = len(ctx.rate_limited)
            sample = await ctx.send(
                client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label=f"probe {index + 1}/{PROBE_REQUESTS}"
            )
            probe.append(sample)
            if len(ctx.rate_limited) > seen or sample.status == 429:
                refused = ctx.rate_limited[-1] if len(ctx.rate_limited) > seen else None
                if refused is None or refused.wait_ms is None:
                    recovery = await _recover(ctx, client)
                break
    return RateLimitEvidence(PROBE_REQUESTS, tuple(probe), tuple(ctx.rate_limited), ctx.quota, recovery)


async def _recover(ctx: Context, client: Client) -> tuple[RecoveryTry, ...]:
    """After a refusal that named no wait: the same short request again at doubling intervals until one is admitted
    (see the module docstring); each try with its time after the refusal, s."""
    refused_at = time.monotonic()
    tries: list[RecoveryTry] = []
    wait = RECOVERY_FIRST_WAIT_S
    for index in range(RECOVERY_TRIES):
        await asyncio.sleep(wait)
        after_s = time.monotonic() - refused_at
        sample = await ctx.send(client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label=f"recovery {index + 1}")
        tries.append(RecoveryTry(after_s, sample.status, sample.ok))
        if not tries[-1].refused:
            break
        wait *= 2
    return tuple(tries)


EXPERIMENT = Experiment(
    family="ratelimit",
    description="a few short requests back to back, with every refusal the run met: does a rate limiter refuse?",
    planned_requests=lambda ctx: PROBE_REQUESTS + RECOVERY_TRIES,
    run=run,
)
