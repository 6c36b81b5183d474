"""The prefill experiment: TTFT against prompt length, from the baseline's sweep towards the server's context limit.

The baseline's sweep points are kept; sizes it did not send (:data:`EXTRA_TOKENS`) are added, shortest first, one
request each (two in a full run), ``max_tokens`` 1, quickack on, TTFT without connection setup. The sweep ends at
the first size the server refuses for its length (``RequestSample.refused``), and before any size whose TTFT,
extrapolated from the points so far with a quadratic term (as if the growth went on bending), would exceed
:data:`PREFILL_BUDGET_MS`. The longest size answered is then sent again until it has :data:`LONGEST_REPEATS`
answers: it is where the check reads the cost and the point with the most leverage on the fitted curvature, so one
late answer there must not stand alone (the check fits each size's fastest repeat).
"""

from __future__ import annotations

from latscope.checks.prefill import PrefillEvidence, PrefillPoint
from latscope.checks.samples import RequestSample
from latscope.checks.stats import fit_line, fit_quadratic
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.diagnose.experiments.baseline import SWEEP_TOKENS, SWEEP_TOKENS_QUICK

#: Sizes added to the baseline's sweep (tokens, about): the middle of short contexts, then long documents.
EXTRA_TOKENS = (1024, 2048, 8192, 16384)
EXTRA_REPEATS = 2
EXTRA_REPEATS_QUICK = 1
#: Answers the longest size answered must have, in a quick run too.
LONGEST_REPEATS = 2
#: Longest TTFT (ms) a single sweep prompt may be predicted to take: bounds the experiment at a few seconds.
PREFILL_BUDGET_MS = 2500.0


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends at most (the baseline's sweep is not counted here)."""
    return len(EXTRA_TOKENS) * (EXTRA_REPEATS_QUICK if quick else EXTRA_REPEATS) + LONGEST_REPEATS - 1


def predicted_ttft_ms(points: list[PrefillPoint], tokens: int) -> float | None:
    """TTFT at ``tokens`` extrapolated from ``points``: the quadratic fit where it bends upward, else the line
    (None with fewer than 2 sizes)."""
    xs = [float(p.prompt_tokens) for p in points]
    ys = [p.ttft_ms for p in points]
    quadratic = fit_quadratic(xs, ys)
    line = fit_line(xs, ys)
    guesses = [f.at(tokens) for f in (quadratic, line) if f is not None]
    if quadratic is not None and quadratic.c < 0:
        guesses = guesses[1:]
    return max(guesses) if guesses else None


async def run(ctx: Context, prior: Prior) -> PrefillEvidence:
    """Run the prefill experiment (see the module docstring)."""
    baseline = prior.baseline
    points = [] if baseline is None else [PrefillPoint(p.prompt_tokens, p.ttft_ms) for p in baseline.sweep]
    refused_at: int | None = None
    if baseline is not None:
        refusals = [f for f in baseline.failures if f.refused]
        accepted = baseline.max_prompt_tokens_accepted or 0
        if refusals:
            sizes = SWEEP_TOKENS_QUICK if ctx.quick else SWEEP_TOKENS
            refused_at = min((t for t in sizes if t > accepted), default=None)
    failed: list[RequestSample] = []
    stopped: int | None = None
    swept = {p.prompt_tokens for p in points}
    repeats = EXTRA_REPEATS_QUICK if ctx.quick else EXTRA_REPEATS
    async with ctx.client(quickack=True) as client:
        for tokens in sorted(EXTRA_TOKENS):
            if tokens in swept or (refused_at is not None and tokens >= refused_at):
                continue
            predicted = predicted_ttft_ms(points, tokens)
            if predicted is not None and predicted > PREFILL_BUDGET_MS:
                stopped = tokens
                break
            for index in range(repeats):
                sample = await ctx.send(client, ctx.spec(tokens, 1), label=f"prefill {tokens} tokens {index + 1}")
                if sample.ok and sample.ttft_after_setup_ms is not None:
                    points.append(PrefillPoint(tokens, sample.ttft_after_setup_ms))
                elif sample.refused:
                    refused_at = tokens
                    break
                else:
                    failed.append(sample)
            if refused_at is not None and refused_at <= tokens:
                break
        longest = max((p.prompt_tokens for p in points), default=None)
        if longest is not None:
            answered = sum(1 for p in points if p.prompt_tokens == longest)
            for index in range(answered, LONGEST_REPEATS):
                sample = await ctx.send(client, ctx.spec(longest, 1), label=f"prefill {longest} tokens {index + 1}")
                if sample.ok and sample.ttft_after_setup_ms is not None:
                    points.append(PrefillPoint(longest, sample.ttft_after_setup_ms))
                else:
                    failed.append(sample)
    points.sort(key=lambda p: p.prompt_tokens)
    return PrefillEvidence(
        points=tuple(points), refused_at=refused_at, budget_stopped_at=stopped, failures=tuple(failed)
    )


EXPERIMENT = Experiment(
    family="prefill",
    description="TTFT vs prompt length towards the context limit: does prefill grow faster than the prompt?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
    needs_sweep=True,  # its shorter points are the baseline's sweep
)
