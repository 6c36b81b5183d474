"""The rate-limit probe: a handful of short requests back to back, stopping at the first refusal.

It runs after every other experiment, so its evidence also holds every rate-limit refusal the run met before it
(:attr:`~latscope.diagnose.context.Context.rate_limited`): a diagnosis already sends a few hundred requests, and a
limiter that refused any of them is found without sending more. The probe itself never hammers: at most
:data:`PROBE_REQUESTS` requests of a short prompt and one token each, on one connection, one after another, and it
stops at the first refusal (429, or 503 with ``Retry-After``).
"""

from __future__ import annotations

from latscope.checks.ratelimit import RateLimitEvidence
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior

#: Requests the probe sends at most: a burst that any limiter meant for interactive use admits, so a refusal of it
#: means the quota was already spent (by this run or by the key's other users).
PROBE_REQUESTS = 6
PROMPT_TOKENS = 8
MAX_TOKENS = 1


async def run(ctx: Context, prior: Prior) -> RateLimitEvidence:
    """Run the probe (see the module docstring)."""
    probe: list[RequestSample] = []
    async with ctx.client() as client:
        for index in range(PROBE_REQUESTS):
            seen = len(ctx.rate_limited)
            sample = await ctx.send(
                client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label=f"probe {index + 1}/{PROBE_REQUESTS}"
            )
            probe.append(sample)
            if len(ctx.rate_limited) > seen or sample.status == 429:
                break
    return RateLimitEvidence(PROBE_REQUESTS, tuple(probe), tuple(ctx.rate_limited), ctx.quota)


EXPERIMENT = Experiment(
    family="ratelimit",
    description="a few short requests back to back, with every refusal the run met: does a rate limiter refuse?",
    planned_requests=lambda ctx: PROBE_REQUESTS,
    run=run,
)
