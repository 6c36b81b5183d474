"""The caching experiment: the same request twice with a varied one between them, on one connection.

``first`` (a short prompt, :data:`MAX_TOKENS` tokens), ``control`` (another prompt of the same size and length: the
server's normal time for such a request) and ``repeat`` (``first`` again, byte for byte). A cache in front of the
model answers ``repeat`` from storage: its headers may say so, and without them it comes back with ``first``'s text
far sooner than ``control``. While the check is undecided (a repeat that came late, its tokens together: a stall
on either side), ``repeat`` is sent again, up to :data:`EXTRA_REPEATS` times. The generated text is kept only as a
SHA-256 digest.
"""

from __future__ import annotations

import hashlib

from latscope.checks.caching import CachedReply, CachingEvidence, check_response_cached
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.dialects.base import RequestSpec
from latscope.findings import Inconclusive
from latscope.signals.cache import cache_state
from latscope.timeline.model import Timeline
from latscope.wire import Client

#: A short prompt: a prefix cache would save little of its prefill, so only a response cache makes a repeat fast.
PROMPT_TOKENS = 16
#: Enough tokens that generating them takes measurable decode time, few enough to stay cheap.
MAX_TOKENS = 8
#: Sends of ``repeat`` beyond the first while the check is undecided: a stall on a loaded host seldom hits twice.
EXTRA_REPEATS = 2


async def run(ctx: Context, prior: Prior) -> CachingEvidence:
    """Run the caching experiment (see the module docstring)."""
    first_spec = ctx.spec(PROMPT_TOKENS, MAX_TOKENS)
    async with ctx.client(keep_text=True, quickack=True) as client:
        first = await _send(ctx, client, first_spec, "cache: first")
        control = await _send(ctx, client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), "cache: varied (control)")
        evidence = CachingEvidence(first, control, await _send(ctx, client, first_spec, "cache: first repeated"))
        while evidence.repeats <= EXTRA_REPEATS and isinstance(check_response_cached(evidence, None), Inconclusive):
            again = await _send(ctx, client, first_spec, "cache: first repeated again")
            evidence = CachingEvidence(first, control, again, evidence.repeats + 1)
    return evidence


async def _send(ctx: Context, client: Client, spec: RequestSpec, label: str) -> CachedReply:
    sample, t = await ctx.send_recorded(client, spec, label=label)
    return CachedReply(sample, cache_state(t.response_headers, warnings=t.warnings), _digest(t))


def _digest(t: Timeline) -> str | None:
    if t.error is not None or not t.output_text:
        return None
    return hashlib.sha256(t.output_text.encode()).hexdigest()


EXPERIMENT = Experiment(
    family="caching",
    description="a request, a varied one and the first again: is a prompt answered from a cache?",
    planned_requests=lambda ctx: 3,  # the repeats sent again are not planned: seldom needed
    run=run,
)
