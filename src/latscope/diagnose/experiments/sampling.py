"""The sampling experiment: the same short prompt decoded greedily and with sampling parameters, alternately.

:data:`PAIRS` greedy/sampled pairs (``max_tokens`` the typical request's, quickack on, one connection), greedy first in
odd pairs and second in even ones so drift on the server cannot favour either. Both streams of a pair share one prompt,
so what a stream's time per token owes to its prompt is the same on both sides, and each pair has a new one, so no body
is sent twice and a cache in front of the server answers none (on llama-cpp-python, pairs of two prompts fell under
half the material difference where pairs of one did not). A greedy warm-up request opens the connection first and is
not measured: a connection's first stream is slower (llama-cpp-python's, and across a network path its last tokens wait
for the first acknowledgements of TCP's initial window). When the check cannot
decide on those pairs (:func:`~latscope.checks.sampling.check_decode_host_overhead` inconclusive: some pair did not show
a difference the others did, or the pairs' spread leaves it within the noise), :data:`EXTRA_PAIRS` more are sent, up to
:data:`EXTRA_ROUNDS` times (a busy host or a network path spreads the pairs so that six or twelve of them, every one
showing the cost, can leave it under three standard errors clear). The sampled requests ask
for every parameter of :data:`SAMPLED` the server accepts: a refusal (4xx) of the whole set falls back to
:data:`SAMPLED_FALLBACK`; a refusal of that too leaves the check not tested. When the set is found costly, each group
of :data:`GROUPS` it holds is priced apart the same way (:data:`GROUP_PAIRS` pairs of greedy against that group alone,
up to :data:`GROUP_EXTRA_ROUNDS` rounds more while undecided), so the finding names the parameters that cost.
"""

from __future__ import annotations

import dataclasses

from latscope.checks.failures import describe
from latscope.checks.samples import RequestSample
from latscope.checks.sampling import ParameterGroup, SamplingEvidence, check_decode_host_overhead
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.findings import Finding, Inconclusive
from latscope.wire import Client

PROMPT_TOKENS = 16
PAIRS = 5
PAIRS_QUICK = 3
EXTRA_PAIRS = 3
#: Rounds of :data:`EXTRA_PAIRS` at most, each sent only while the check cannot decide.
EXTRA_ROUNDS = 5
GREEDY: dict[str, object] = {"temperature": 0}
#: Nucleus sampling, both OpenAI penalties and logprobs: the parameters engines take off the fused decode path.
SAMPLED: dict[str, object] = {
    "temperature": 1.0,
    "top_p": 0.9,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.5,
    "logprobs": True,
    "top_logprobs": 5,
}
SAMPLED_FALLBACK: dict[str, object] = {"temperature": 1.0, "top_p": 0.9, "frequency_penalty": 0.5}
#: The groups priced apart (names of :data:`latscope.checks.sampling.GROUP_FIXES`) and their parameters; a group's
#: requests are greedy but for it (top-p needs a temperature to filter anything), so only its path differs.
GROUPS: dict[str, dict[str, object]] = {
    "nucleus": {"temperature": 1.0, "top_p": 0.9},
    "penalties": {"temperature": 0, "presence_penalty": 0.5, "frequency_penalty": 0.5},
    "logprobs": {"temperature": 0, "logprobs": True, "top_logprobs": 5},
}
#: Pairs per group, and rounds of :data:`EXTRA_PAIRS` more at most while its check cannot decide.
GROUP_PAIRS = 3
GROUP_EXTRA_ROUNDS = 2


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends (about: a refused parameter set is sent once more, reduced)."""
    # and 2 * EXTRA_PAIRS per round while the check cannot decide, and each group's pairs once it found a cost
    return 1 + 2 * (PAIRS_QUICK if quick else PAIRS)


async def run(ctx: Context, prior: Prior) -> SamplingEvidence:
    """Run the sampling experiment (see the module docstring)."""
    tokens = max(8, prior.typical_max_tokens)
    greedy: list[RequestSample] = []
    sampled: list[RequestSample] = []
    parameters: dict[str, object] | None = SAMPLED
    refused: str | None = None
    async with ctx.client(quickack=True) as client:
        await _send(ctx, client, tokens, GREEDY, "warm-up")
        planned = PAIRS_QUICK if ctx.quick else PAIRS
        for index in range(planned + EXTRA_ROUNDS * EXTRA_PAIRS):
            if index >= planned and (index - planned) % EXTRA_PAIRS == 0:
                so_far = SamplingEvidence(tokens, tuple(greedy), tuple(sampled), tuple(parameters or ()), refused)
                if not isinstance(check_decode_host_overhead(so_far, None), Inconclusive):
                    break
            order = ("greedy", "sampled") if index % 2 == 0 else ("sampled", "greedy")
            seed = ctx.next_seed()  # one prompt for both streams of the pair
            for kind in order:
                if kind == "greedy":
                    greedy.append(await _send(ctx, client, tokens, GREEDY, f"greedy {index + 1}", seed))
                    continue
                if parameters is None:
                    continue
                sample = await _send(ctx, client, tokens, parameters, f"sampled {index + 1}", seed)
                if sample.refused and not sampled:
                    refused = describe(sample)
                    parameters = SAMPLED_FALLBACK if parameters is SAMPLED else None
                    if parameters is None:
                        continue
                    sample = await _send(
                        ctx, client, tokens, parameters, f"sampled {index + 1} (fewer parameters)", seed
                    )
                    if sample.refused:
                        refused, parameters = describe(sample), None
                        continue
                sampled.append(sample)
        evidence = SamplingEvidence(tokens, tuple(greedy), tuple(sampled), tuple(parameters or ()), refused)
        if isinstance(check_decode_host_overhead(evidence, None), Finding):
            groups = [await _price_apart(ctx, client, tokens, name, g) for name, g in _groups(evidence.parameters)]
            evidence = dataclasses.replace(evidence, groups=tuple(groups))
    return evidence


def _groups(accepted: tuple[str, ...]) -> list[tuple[str, dict[str, object]]]:
    """The groups of :data:`GROUPS` whose own parameters the accepted set holds (those only, with the group's
    temperature), when it holds more than one: a set of one group needs no pricing apart."""
    out = []
    for name, group in GROUPS.items():
        own = [k for k in group if k != "temperature" and k in accepted]
        if own:
            out.append((name, {k: v for k, v in group.items() if k == "temperature" or k in own}))
    return out if len(out) > 1 else []


async def _price_apart(
    ctx: Context, client: Client, tokens: int, name: str, parameters: dict[str, object]
) -> ParameterGroup:
    """Greedy against ``parameters`` alone, pair by pair as the whole set was, until its check decides."""
    greedy: list[RequestSample] = []
    sampled: list[RequestSample] = []
    names = tuple(k for k in parameters if k != "temperature" or parameters[k] != 0)

    def evidence() -> SamplingEvidence:
        return SamplingEvidence(tokens, tuple(greedy), tuple(sampled), names)

    for index in range(GROUP_PAIRS + GROUP_EXTRA_ROUNDS * EXTRA_PAIRS):
        due = index >= GROUP_PAIRS and (index - GROUP_PAIRS) % EXTRA_PAIRS == 0
        if due and not isinstance(check_decode_host_overhead(evidence(), None), Inconclusive):
            break
        seed = ctx.next_seed()
        for kind in ("greedy", name) if index % 2 == 0 else (name, "greedy"):
            extra = GREEDY if kind == "greedy" else parameters
            sample = await _send(ctx, client, tokens, extra, f"{name} apart: {kind} {index + 1}", seed)
            (greedy if kind == "greedy" else sampled).append(sample)
    return ParameterGroup(name, evidence())


async def _send(
    ctx: Context, client: Client, tokens: int, extra: dict[str, object], label: str, seed: int | None = None
) -> RequestSample:
    return await ctx.send(client, ctx.spec(PROMPT_TOKENS, tokens, extra=extra, seed=seed), label=label)


EXPERIMENT = Experiment(
    family="sampling",
    description="the same prompt decoded greedily and with top-p, penalties and logprobs: does sampling tax tokens?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
