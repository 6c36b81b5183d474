"""The prefix-cache experiment: a long prefix sent twice with different suffixes, against prompts of the same size
whose prefix is new, and the suffix alone.

Per round, one after another on one connection (quickack on, one token generated): ``cold`` (a fresh
:data:`PREFIX_TOKENS`-token prefix and a :data:`SUFFIX_TOKENS`-token suffix), ``warm`` (the same prefix, another
suffix), ``fresh`` (a prefix never sent, the same size) and ``short`` (a suffix-sized prompt alone). ``warm`` follows
``cold`` at once, so a cache of any size still holds the prefix. Rounds: :data:`ROUNDS_QUICK` in a quick run,
:data:`ROUNDS` in a full one, and up to :data:`EXTRA_ROUNDS` more while the check is undecided (noise on a shared
host or path). A prefix the server refuses for its length (a context shorter than the experiment's) is halved down
to :data:`MIN_PREFIX_TOKENS`, as is one the baseline saw refused.
"""

from __future__ import annotations

from latscope.checks.prefixcache import PrefixCacheEvidence, PrefixRound, check_prefix_cache_miss
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.dialects.prompts import shared_prefix_prompt, synthetic_prompt
from latscope.findings import Inconclusive
from latscope.wire import Client

#: The shared prefix, tokens: a system prompt with tools, or a few turns of a conversation; large enough that its
#: prefill stands out of the noise on a GPU (~20 ms for a 7B model), small enough for any context.
PREFIX_TOKENS = 2048
MIN_PREFIX_TOKENS = 256
#: The new part of each request, tokens: a user's next message.
SUFFIX_TOKENS = 32
ROUNDS = 3
ROUNDS_QUICK = 2
EXTRA_ROUNDS = 2


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends (about: undecided rounds and refused prefixes add some)."""
    return 4 * (ROUNDS_QUICK if quick else ROUNDS)


def _first_prefix(prior: Prior) -> int:
    """The first prefix size to try: :data:`PREFIX_TOKENS`, halved below what the baseline saw refused."""
    tokens = PREFIX_TOKENS
    baseline = prior.baseline
    if baseline is not None and any(f.refused for f in baseline.failures):
        accepted = baseline.max_prompt_tokens_accepted or MIN_PREFIX_TOKENS
        while tokens > MIN_PREFIX_TOKENS and tokens + SUFFIX_TOKENS > accepted:
            tokens //= 2
    return tokens


async def _round(ctx: Context, client: Client, prefix_tokens: int, index: int) -> PrefixRound:
    """One round: cold, warm, fresh and short, in that order."""
    shared = ctx.next_seed()

    async def send(prompt: str, kind: str) -> RequestSample:
        return await ctx.send(client, ctx.spec_for(prompt, 1), label=f"prefix {kind} {index}")

    cold = await send(shared_prefix_prompt(prefix_tokens, shared, SUFFIX_TOKENS, ctx.next_seed()), "cold")
    warm = await send(shared_prefix_prompt(prefix_tokens, shared, SUFFIX_TOKENS, ctx.next_seed()), "warm")
    fresh_prompt = shared_prefix_prompt(prefix_tokens, ctx.next_seed(), SUFFIX_TOKENS, ctx.next_seed())
    fresh = await send(fresh_prompt, "fresh")
    short = await send(synthetic_prompt(SUFFIX_TOKENS, ctx.next_seed()), "short")
    return PrefixRound(cold, warm, fresh, short)


async def run(ctx: Context, prior: Prior) -> PrefixCacheEvidence:
    """Run the prefix-cache experiment (see the module docstring)."""
    prefix = _first_prefix(prior)
    refused_at: int | None = None
    rounds: list[PrefixRound] = []
    wanted = ROUNDS_QUICK if ctx.quick else ROUNDS
    async with ctx.client(quickack=True) as client:
        while len(rounds) < wanted + EXTRA_ROUNDS:
            done = await _round(ctx, client, prefix, len(rounds) + 1)
            if done.cold.refused and prefix // 2 >= MIN_PREFIX_TOKENS:
                refused_at, prefix = prefix, prefix // 2
                continue
            rounds.append(done)
            if not done.complete and not any(r.complete for r in rounds[-2:-1]):
                break  # two rounds in a row with a failure: the check says why
            if len(rounds) >= wanted:
                evidence = PrefixCacheEvidence(prefix, SUFFIX_TOKENS, tuple(rounds), refused_at)
                if not isinstance(check_prefix_cache_miss(evidence, None), Inconclusive):
                    break
    return PrefixCacheEvidence(prefix, SUFFIX_TOKENS, tuple(rounds), refused_at)


EXPERIMENT = Experiment(
    family="prefixcache",
    description="a long prefix sent twice with new suffixes, against fresh prompts of its size: is it cached?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
