"""``prefill-superlinear``: prefill time grows faster than the prompt.

Mechanism: the linear layers cost the same per prompt token, attention costs per token *pair*: an engine's prefill
is ``a + b·n + c·n²`` for a prompt of ``n`` tokens. Efficient attention kernels (FlashAttention) and chunked
prefill keep ``c·n²`` a small share of TTFT up to long contexts; a naive kernel lets it dominate. The check fits
TTFT against prompt length with a constant, a linear and a quadratic term and their uncertainty, and reports the
quadratic part at the longest prompt measured — what that prompt pays above the linear extrapolation of the rest —
when it is both well determined and a material share of its TTFT.

The fit is over each size's fastest repeat (:func:`floor_points`): a busy host or path only ever adds time, and one
late answer at the longest prompt, the point with the most leverage on ``c``, would otherwise be read as curvature.

The fit is over TTFT without connection setup with one token generated, so every point carries the same fixed
costs (the round trip, the first decode step); on a remote target the longer upload of a long prompt adds a term
that grows more slowly than the prompt (slow start: round trips, not bytes), which can only hide curvature, never
add it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import fit_quadratic
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

PREFILL_ID = "prefill-superlinear"

#: The quadratic part is material at this share of the longest prompt's TTFT: nearly a third of the wait is
#: attention over the prompt's token pairs.
MATERIAL_SHARE = 0.30
#: Below this share the growth is as linear as an efficient kernel keeps it: FlashAttention-style attention on a 7B
#: model is about 5 % of an 8k-token prefill and 20 % of a 32k one.
CLEAR_SHARE = 0.20
#: The quadratic coefficient must stand this many standard errors above zero.
MIN_Z = 3.0
#: Distinct prompt sizes needed for a fit with residual degrees of freedom, and the longest prompt (tokens) the
#: sweep must reach for attention to be measurable at all.
MIN_SIZES = 4
MIN_LONGEST_TOKENS = 2048
#: The longest prompt's TTFT must stand this far (ms) above the shortest for a curve to be fitted at all.
MIN_SPAN_MS = 5.0
#: Prompts whose sizes (tokens) differ by less than this share are repeats of one sweep size: a server's tokenizer
#: counts two prompts of different words a few tokens apart. The sweep's sizes are at least twice apart.
SAME_SIZE_SHARE = 0.02


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """One prompt of the prefill sweep: its size (tokens, as the server counted them where it said, else as sent)
    and TTFT without connection setup (ms)."""

    prompt_tokens: int
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class PrefillEvidence:
    """The prefill experiment: TTFT against prompt length, the baseline's sweep extended towards the server's
    context limit (``max_tokens`` 1).

    Fields:
        points: every prompt that completed (the baseline's sweep points included).
        refused_at: the smallest prompt (tokens) the server refused for its length, None when none was.
        budget_stopped_at: the first size not sent because its predicted TTFT was over the experiment's budget.
        failures: prompts that failed other than by a refusal.
    """

    points: tuple[PrefillPoint, ...] = ()
    refused_at: int | None = None
    budget_stopped_at: int | None = None
    failures: tuple[RequestSample, ...] = ()


def size_groups(points: tuple[PrefillPoint, ...]) -> list[list[PrefillPoint]]:
    """The points grouped by sweep size (repeats within :data:`SAME_SIZE_SHARE` of the group's shortest), shortest
    size first."""
    groups: list[list[PrefillPoint]] = []
    for p in sorted(points, key=lambda p: p.prompt_tokens):
        if groups and p.prompt_tokens - groups[-1][0].prompt_tokens <= SAME_SIZE_SHARE * groups[-1][0].prompt_tokens:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def floor_points(points: tuple[PrefillPoint, ...]) -> list[PrefillPoint]:
    """Per sweep size, its fastest repeat, shortest size first. Noise on a shared host or path (scheduling, a
    collector, other traffic) only ever adds time, so the per-size minimum is the server's own prefill."""
    return [_fastest(group) for group in size_groups(points)]


def _fastest(group: list[PrefillPoint]) -> PrefillPoint:
    return min(group, key=lambda p: p.ttft_ms)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def check_prefill_superlinear(ev: PrefillEvidence, reference: Reference | None) -> Outcome:
    """Finding when the fitted quadratic term is at least :data:`MATERIAL_SHARE` of the longest prompt's TTFT and
    :data:`MIN_Z` standard errors above zero; clear below :data:`CLEAR_SHARE`."""
    broken = failures.too_many_failed(ev.failures, ok_elsewhere=len(ev.points))
    if broken:
        return NotTested(PREFILL_ID, f"the target misbehaved during the prefill sweep: {broken}")
    groups = size_groups(ev.points)
    floors = [_fastest(group) for group in groups]
    sizes = [p.prompt_tokens for p in floors]
    if len(sizes) < MIN_SIZES or sizes[-1] < MIN_LONGEST_TOKENS:
        limit = f"; the server refused {ev.refused_at} tokens" if ev.refused_at else ""
        reason = failures.summarise(ev.failures) or f"{len(sizes)} prompt size(s) up to {sizes[-1] if sizes else 0}"
        return NotTested(
            PREFILL_ID,
            f"the prefill sweep needs {MIN_SIZES} sizes up to at least {MIN_LONGEST_TOKENS} tokens: {reason}{limit}",
        )
    fit = fit_quadratic([float(p.prompt_tokens) for p in floors], [p.ttft_ms for p in floors])
    longest = float(sizes[-1])
    ttft_longest = floors[-1].ttft_ms
    evidence: dict[str, Any] = {
        "points": [[p.prompt_tokens, _round(p.ttft_ms)] for p in ev.points],
        "longest_prompt_tokens": sizes[-1],
        "longest_ttft_ms": _round(ttft_longest),
        "longest_repeats": len(groups[-1]),
        "refused_at_tokens": ev.refused_at,
        "budget_stopped_at_tokens": ev.budget_stopped_at,
    }
    shortest = floors[0].ttft_ms
    if fit is None or ttft_longest - shortest < MIN_SPAN_MS:
        return Clear(
            PREFILL_ID,
            f"TTFT barely grows with the prompt ({shortest:.1f} ms at {sizes[0]} tokens, {ttft_longest:.1f} ms at "
            f"{sizes[-1]}): nothing to bend",
            evidence,
        )
    quadratic = fit.quadratic_at(longest)
    share = quadratic / ttft_longest if ttft_longest > 0 else 0.0
    z = fit.c / fit.c_se if fit.c_se else (float("inf") if fit.c > 0 else 0.0)
    evidence.update(
        {
            "fit_ms": {"constant": _round(fit.a), "per_token": fit.b, "per_token2": fit.c},
            "per_token2_se": fit.c_se,
            "quadratic_z": _round(z, 2) if z != float("inf") else None,
            "quadratic_ms_at_longest": _round(quadratic),
            "quadratic_share_at_longest": _round(share),
            "residual_sd_ms": _round(fit.residual_sd),
        }
    )
    if share < CLEAR_SHARE or fit.c <= 0:
        return Clear(
            PREFILL_ID,
            f"prefill grows about linearly: the quadratic part is {max(0.0, share):.0%} of TTFT at {sizes[-1]} "
            f"tokens ({fit.b * 1000:.2f} ms per 1k tokens)",
            evidence,
        )
    if share < MATERIAL_SHARE or z < MIN_Z:
        why = f"{share:.0%} of TTFT" if share < MATERIAL_SHARE else f"only {z:.1f} standard errors above zero"
        return Inconclusive(
            PREFILL_ID,
            f"TTFT bends upward with the prompt, but the quadratic part at {sizes[-1]} tokens is {why}",
            evidence,
        )
    return costed_finding(
        PREFILL_ID,
        quadratic,
        reference,
        cost_basis=(
            f"ms the {sizes[-1]}-token prompt waits above the linear part of the fit (constant + per-token cost "
            f"{fit.b * 1000:.2f} ms per 1k tokens): the quadratic term c·n² with c = {fit.c:.3g} ms/token², "
            f"{share:.0%} of its {ttft_longest:.0f} ms TTFT; it grows with the square of longer prompts"
        ),
        evidence=evidence,
        rule=(
            f"TTFT vs prompt tokens ({len(sizes)} sizes, {sizes[0]}–{sizes[-1]}) fitted a + b·n + c·n²: c·n² at the "
            f"longest is {share:.0%} of its TTFT (≥ {MATERIAL_SHARE:.0%}), c {z:.1f} standard errors above zero"
        ),
        confidence=Confidence.HIGH if fit.n - 3 >= 3 else Confidence.MEDIUM,
    )
