"""The gateway-overhead experiment: the same requests through the target (a gateway) and to its upstream directly.

Only with ``--direct UPSTREAM_URL`` (:attr:`Context.direct_url`); without it nothing is sent. One client, a pool per
origin: a warm-up request on each path first (it opens that path's connection and proves the path answers), then
:data:`PAIRS` pairs, each one request to each path sent back to back on the kept-alive connections, the gateway's
first in one pair and the direct one first in the next (a drift in the upstream's speed over the pairs falls on
both sides equally). Every request has the same shape, :data:`PROMPT_TOKENS` prompt tokens and
:data:`MAX_TOKENS` streamed tokens, and a prompt of its own: a prefix or response cache in the upstream must not make
one side of a pair cheaper. The warm-ups also record which address each path reached: two URLs for one listener are
one server (:mod:`latscope.checks.overhead` reads all of it).
"""

from __future__ import annotations

from latscope.checks.overhead import GatewayOverheadEvidence
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.timeline.model import Timeline

#: A short prompt: the comparison is about what a hop adds, not about the engine's prefill.
PROMPT_TOKENS = 32
#: Streamed tokens per request: enough chunks for a per-chunk difference, a fraction of a second each.
MAX_TOKENS = 16
#: Pairs compared: a bounded handful (18 requests in all), enough for an interval of the median that covers it 93 %
#: of the time and still excludes one stray pair at either end (the second smallest and second largest of eight
#: differences: a request that met a pause on a busy host does not decide).
PAIRS = 8


def planned_requests(ctx: Context) -> int:
    """Requests this experiment sends (none without ``--direct``)."""
    return 0 if ctx.direct_url is None else 2 * (PAIRS + 1)


def _address(t: Timeline) -> str | None:
    info = t.connection
    if info is None or info.remote_address is None:
        return None
    return f"{info.remote_address}:{info.remote_port}"


async def run(ctx: Context, prior: Prior) -> GatewayOverheadEvidence:
    """Run the comparison (see the module docstring)."""
    direct = ctx.direct_url
    if direct is None or direct == ctx.base_url:
        return GatewayOverheadEvidence(ctx.base_url, direct)
    async with ctx.client() as client:
        gateway_warm, gateway_t = await ctx.send_recorded(client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label="warm-up")
        direct_warm, direct_t = await ctx.send_recorded(
            client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label="direct warm-up", base_url=direct
        )
        evidence = GatewayOverheadEvidence(
            ctx.base_url,
            direct,
            gateway_address=_address(gateway_t),
            direct_address=_address(direct_t),
            warmup=(gateway_warm, direct_warm),
        )
        if not (gateway_warm.ok and direct_warm.ok) or evidence.gateway_address == evidence.direct_address:
            return evidence
        pairs: list[tuple[RequestSample, RequestSample]] = []
        for index in range(PAIRS):
            label = f"{index + 1}/{PAIRS}"
            sides: dict[str, RequestSample] = {}
            for side in ("gateway", "direct") if index % 2 == 0 else ("direct", "gateway"):
                sides[side] = await ctx.send(
                    client,
                    ctx.spec(PROMPT_TOKENS, MAX_TOKENS),
                    label=f"{side} {label}",
                    base_url=direct if side == "direct" else None,
                )
            pairs.append((sides["gateway"], sides["direct"]))
    return GatewayOverheadEvidence(
        ctx.base_url,
        direct,
        gateway_address=evidence.gateway_address,
        direct_address=evidence.direct_address,
        warmup=evidence.warmup,
        pairs=tuple(pairs),
    )


EXPERIMENT = Experiment(
    family="overhead",
    description="with --direct: the same requests through the gateway and to its upstream, in pairs: what the hop "
    "adds per request and per chunk",
    planned_requests=planned_requests,
    run=run,
)
