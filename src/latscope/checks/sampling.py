"""``decode-host-overhead``: every decoded token pays for work the host does outside the GPU's step.

Mechanism: engines fuse greedy (and plain-temperature) sampling into the decode step on the device, but nucleus and
top-k filtering, presence/frequency/repetition penalties and logprobs take a slower path — a sort and softmax over
the vocabulary, a pass over the generated tokens, often on the host and serialised with the step — that adds a
constant to every step of a batch that needs it. The experiment decodes the same prompt to the same length greedily
and with those parameters, alternately on one connection, so the only difference is the sampling path: the check
compares the two streams' time per output token, with its noise. A stream's time per token is its mean gap, from
its first token to its last: the decode time the stream took, whatever its reads looked like. Its median gap is not
(measured): across a network path a fast stream's tokens arrive several to one read, and servers hold tokens back
and release them together (llama-cpp-python holds a tiny model's greedy tokens back, then sends ten at once), so most
gaps of such a stream are near 0 and its median says nothing of the steps.

Which parameters cost: engines differ (llama-cpp-python, by hand: temperature/top-p and the penalties cost nothing
next to greedy, logprobs with top_logprobs +0.5 ms per token; vLLM: the set together +1.9 ms), so once the set is
found costly the experiment prices each group of :data:`GROUP_FIXES` apart, greedy against that group alone, with
the same check; the finding names the groups that cost and gives their fixes, and says when none costs alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, robust_sd, sign_test_p
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Outcome

SAMPLING_ID = "decode-host-overhead"

#: Sampling is material when it adds at least this share of the greedy time per token …
MATERIAL_SHARE = 0.10
#: … and at least this much (ms per token): the size of one read's user-space stamping jitter on a quiet host, so a
#: difference below it is not one the client can vouch for. Above it the share decides (a CPU server such as
#: llama-cpp-python decodes in about a millisecond per token).
MIN_ADDED_MS = 0.1
#: The difference must stand this many standard errors above zero.
NOISE_Z = 3.0
#: A clear needs the difference this many standard errors below the material line: a median under it that the
#: pairs' spread could lift over it is not the fast path measured (llama-cpp-python's pairs scatter that widely).
CLEAR_Z = 2.0
#: Streams needed on each side.
MIN_STREAMS = 2
#: Every greedy/sampled pair must show at least this share of the material difference for a finding (and none the
#: whole of it for a clear) …
PAIR_SHARE = 0.5
#: … but one in four, from this many pairs on: a stream of one pair held up by the host (a stall inside it moves its
#: mean) is not the sampling path, while a difference the host's load carries from pair to pair misses in several
#: (on a busy host llama-cpp-python holds up about one pair in five).
PAIRS_FOR_A_MISS = 5
#: … or more misses than that, when so many pairs were slower at all that noise favouring neither stream would make
#: that many at most this seldom (a one-sided sign test; about four pairs in five): a cost only a little above the
#: pairs' own noise misses half the line in one pair of three while nearly every pair still leans its way, where a
#: difference that some pairs carry and the others do not leaves the others slower or faster alike.
SIGN_TEST_P = 0.01

#: The parameter groups priced apart (the experiment's names) and the fix for each that costs.
GROUP_FIXES: dict[str, str] = {
    "nucleus": (
        "Top-p/top-k filtering runs off the fused step: use a device-side sampler (FlashInfer's, or the engine's "
        "fused top-p/top-k) or greedy/plain temperature where quality allows."
    ),
    "penalties": (
        "Presence/frequency penalties pass over the generated tokens every step: send them only where they change "
        "the answer, or use an engine that applies them on the device."
    ),
    "logprobs": (
        "Logprobs cost a softmax and sort over the vocabulary every token: ask for them (and top_logprobs) only on "
        "the requests that use them, with the fewest top_logprobs that serve."
    ),
}


@dataclass(frozen=True, slots=True)
class SamplingEvidence:
    """The sampling experiment: the same short prompt and length decoded greedily and with sampling parameters,
    alternately on one connection.

    Fields:
        max_tokens: tokens each stream generates.
        greedy: the greedy streams (``temperature`` 0).
        sampled: the streams that asked for top-p, penalties and logprobs (``parameters``).
        parameters: the sampling parameters the server accepted (names), empty when it refused every set tried.
        refused: what the server answered to sampling parameters it refused, when it did.
        groups: each parameter group priced apart (:class:`ParameterGroup`), once the whole set was found costly;
            empty otherwise.
    """

    max_tokens: int
    greedy: tuple[RequestSample, ...] = ()
    sampled: tuple[RequestSample, ...] = ()
    parameters: tuple[str, ...] = ()
    refused: str | None = None
    groups: tuple[ParameterGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class ParameterGroup:
    """One group of :data:`GROUP_FIXES` priced apart: greedy streams against streams that ask for that group alone
    (``evidence.parameters``), pair by pair like the whole set."""

    name: str
    evidence: SamplingEvidence


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _mean_gap_ms(itl_ms: tuple[float, ...]) -> float | None:
    """A stream's time per output token (ms): its mean gap, first token to last; None under 2 gaps. (The gaps a
    sample keeps, so the count is of token events; :func:`latscope.timeline.metrics.tpot_ms` divides a timeline's
    span by the server's token count instead.)"""
    return sum(itl_ms) / len(itl_ms) if len(itl_ms) >= 2 else None


def _tpots(samples: tuple[RequestSample, ...]) -> list[float]:
    values = [_mean_gap_ms(s.itl_ms) for s in samples if s.ok]
    return [v for v in values if v is not None]


def _pair_differences(ev: SamplingEvidence) -> list[float]:
    """Sampled minus greedy per-token time (ms) of each pair the experiment sent back to back (the i-th of each),
    where both streams completed with several tokens."""
    out = []
    for greedy, sampled in zip(ev.greedy, ev.sampled, strict=False):
        g, s = _tpots((greedy,)), _tpots((sampled,))
        if g and s:
            out.append(s[0] - g[0])
    return out


def _pairs_allowed_to_disagree(pairs: list[float]) -> int:
    """How many pairs may contradict the median, a finding's or a clear's: none under :data:`PAIRS_FOR_A_MISS`
    pairs, one in four from there on."""
    return len(pairs) // 4 if len(pairs) >= PAIRS_FOR_A_MISS else 0


@dataclass(frozen=True, slots=True)
class _Difference:
    """Sampled against greedy time per token (ms).

    ``greedy`` / ``sampled``: each stream's time per token; ``g`` / ``s``: their medians; ``pairs``: sampled minus
    greedy of each pair sent back to back; ``added``: the difference decided on, ``se`` its standard error;
    ``slower``: pairs whose sampled stream was slower, ``slower_p`` the sign test's p-value of that (1.0 without
    pairs); ``threshold``: the difference that would matter.
    """

    greedy: list[float]
    sampled: list[float]
    g: float
    s: float
    pairs: list[float]
    added: float
    se: float
    slower: int
    slower_p: float
    threshold: float


def check_decode_host_overhead(ev: SamplingEvidence, reference: Reference | None) -> Outcome:
    """Finding when sampled streams take at least :data:`MATERIAL_SHARE` (and :data:`MIN_ADDED_MS`) longer per
    token than greedy ones, :data:`NOISE_Z` standard errors clear of noise; the cost is that per-token time over one
    stream of the experiment's length. Clear when the difference is :data:`CLEAR_Z` standard errors under that
    line; inconclusive in between."""
    unmeasured = _unmeasured(ev)
    if unmeasured is not None:
        return unmeasured
    d = _difference(ev)
    evidence = _evidence(ev, d)
    if d.added < d.threshold:
        return _below_threshold(ev, d, evidence)
    undecided = _not_clear_of_noise(d, evidence)
    if undecided is not None:
        return undecided
    return _finding(ev, reference, d, evidence)


def _unmeasured(ev: SamplingEvidence) -> NotTested | None:
    """Why the streams cannot be compared (parameters refused, a misbehaving target, too few streams), None when
    they can."""
    if ev.refused is not None and not ev.parameters:
        return NotTested(SAMPLING_ID, f"the server refused every set of sampling parameters tried: {ev.refused}")
    samples = (*ev.greedy, *ev.sampled)
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(SAMPLING_ID, f"the target misbehaved during the sampling experiment: {broken}")
    greedy, sampled = _tpots(ev.greedy), _tpots(ev.sampled)
    if len(greedy) < MIN_STREAMS or len(sampled) < MIN_STREAMS:
        reason = failures.summarise(samples) or "too few streams of several tokens completed"
        return NotTested(SAMPLING_ID, f"the sampling experiment could not measure: {reason}")
    return None


def _difference(ev: SamplingEvidence) -> _Difference:
    """The per-token difference, its standard error, and the line it is held to."""
    greedy, sampled = _tpots(ev.greedy), _tpots(ev.sampled)
    g, s = median(greedy), median(sampled)
    assert g is not None and s is not None
    # A host-side cost is paid on every sampled step, so each greedy/sampled pair, sent back to back, shows it; and
    # the host's load, which moves a stream's time per token by more than the cost here, moves both of a pair alike.
    # So the difference is the pairs' median, with the pairs' own spread for its standard error; without pairs, the
    # medians' difference with both sides' spreads.
    pairs = _pair_differences(ev)
    if len(pairs) >= MIN_STREAMS:
        paired = median(pairs)
        assert paired is not None
        added = paired
        se = (robust_sd(pairs) or 0.0) / math.sqrt(len(pairs))
    else:
        added = s - g
        spread = max(robust_sd(greedy) or 0.0, robust_sd(sampled) or 0.0)
        se = spread * math.sqrt(1 / len(greedy) + 1 / len(sampled))
    slower = sum(1 for d in pairs if d > 0)
    slower_p = sign_test_p(slower, len(pairs))  # 1.0 without pairs
    threshold = max(MIN_ADDED_MS, MATERIAL_SHARE * g)
    return _Difference(greedy, sampled, g, s, pairs, added, se, slower, slower_p, threshold)


def _evidence(ev: SamplingEvidence, d: _Difference) -> dict[str, Any]:
    """The streams' times per token and the difference."""
    evidence: dict[str, Any] = {
        "greedy_tpot_ms": _round(d.g),
        "sampled_tpot_ms": _round(d.s),
        "added_ms_per_token": _round(d.added),
        "added_se_ms": _round(d.se),
        "stream_tokens": ev.max_tokens,
        "parameters": list(ev.parameters),
        "greedy_tpots_ms": [_round(v) for v in d.greedy],
        "sampled_tpots_ms": [_round(v) for v in d.sampled],
        "pair_differences_ms": [_round(x) for x in d.pairs],
    }
    if d.pairs:
        evidence["pairs_slower"] = d.slower
        evidence["sign_test_p"] = _round(d.slower_p, 4)
    return evidence


def _below_threshold(ev: SamplingEvidence, d: _Difference, evidence: dict[str, Any]) -> Clear | Inconclusive:
    """A difference under the line: clear, unless the pairs spread too much or some of them showed the cost."""
    added, threshold, se, pairs = d.added, d.threshold, d.se, d.pairs
    if threshold <= added + CLEAR_Z * se:
        return Inconclusive(
            SAMPLING_ID,
            f"sampled streams took {added:+.2f} ms per token over greedy ones, under the {threshold:.2f} ms that "
            f"would matter, but the pairs spread too much to rule that out ({CLEAR_Z:g} standard errors of "
            f"{se:.2f} ms): the host's load moved the streams; more pairs would settle it",
            evidence,
        )
    # a cost that some pairs showed in full while the median did not: the host's load (a server that holds its
    # tokens back and sends them in bursts moves their time per token by as much as sampling costs) hid it in the
    # others, or made it in these; either way not the fast path measured
    hits = sum(1 for x in pairs if x >= threshold)
    if hits > _pairs_allowed_to_disagree(pairs):
        return Inconclusive(
            SAMPLING_ID,
            f"sampled streams took {added:+.2f} ms per token over greedy ones in the median, under the "
            f"{threshold:.2f} ms that would matter, but {hits} of {len(pairs)} pairs sent back to back showed "
            f"that much (largest {max(pairs):+.2f} ms): the fast path shows in every pair; more pairs would "
            "settle it",
            evidence,
        )
    return Clear(
        SAMPLING_ID,
        f"sampling ({', '.join(ev.parameters)}) adds {added:+.2f} ms per token to a greedy {d.g:.2f} ms: it stays "
        "on the fast path",
        evidence,
    )


def _not_clear_of_noise(d: _Difference, evidence: dict[str, Any]) -> Inconclusive | None:
    """Inconclusive when a material difference is within the noise or carried by some pairs only, else None."""
    added, se, pairs = d.added, d.se, d.pairs
    if added < NOISE_Z * se:
        # a material difference the noise could have made: not a clear path, not a finding
        return Inconclusive(
            SAMPLING_ID,
            f"sampled streams took {added:+.2f} ms per token over greedy ones, but that is within {NOISE_Z:g} "
            f"standard errors ({se:.2f} ms) of nothing: the host's load moved the streams too much; more pairs "
            "would settle it",
            evidence,
        )
    # a difference carried by some pairs only is the host's load moving between them; one that nearly every pair
    # leans towards, some by less than half the line, is a cost not far above the pairs' noise
    floor = PAIR_SHARE * d.threshold
    misses = sum(1 for x in pairs if x < floor)
    if misses > _pairs_allowed_to_disagree(pairs) and d.slower_p > SIGN_TEST_P:
        return Inconclusive(
            SAMPLING_ID,
            f"sampled streams took {added:+.2f} ms per token over greedy ones in the median, but {misses} of "
            f"{len(pairs)} pairs sent back to back did not show it (smallest {min(pairs):+.2f} ms, under "
            f"{floor:.2f}) and only {d.slower} were slower at all, as many as the host's load alone makes "
            f"(p {d.slower_p:.2f}): a cost paid on every sampled step shows in each; more pairs would settle it",
            evidence,
        )
    return None


def _finding(ev: SamplingEvidence, reference: Reference | None, d: _Difference, evidence: dict[str, Any]) -> Outcome:
    """The finding: the per-token difference over one stream of the experiment's length."""
    added, g, s, pairs = d.added, d.g, d.s, d.pairs
    tokens = max(1, ev.max_tokens - 1)
    cost = added * tokens
    apart, costly = _priced_apart(ev.groups)
    if apart:
        evidence["by_parameter"] = apart
    return costed_finding(
        SAMPLING_ID,
        cost,
        reference,
        cost_basis=(
            f"ms a {ev.max_tokens}-token stream pays for sampling: {added:.2f} ms on each of its {tokens} gaps "
            f"({s:.2f} ms per token sampled vs {g:.2f} greedy); it grows with the answer"
        ),
        evidence=evidence,
        rule=(
            f"streams asking for {', '.join(ev.parameters)} took {added / g:.0%} longer per token than greedy ones "
            f"of the same prompt and length, pair by pair (≥ {MATERIAL_SHARE:.0%}, {NOISE_Z:g} standard errors clear"
            + (f"; {d.slower} of {len(pairs)} pairs slower)" if pairs else ")")
            + _apart_rule(apart)
        ),
        confidence=Confidence.HIGH if min(len(d.greedy), len(d.sampled)) >= 3 else Confidence.MEDIUM,
        fix=" ".join(GROUP_FIXES[name] for name in costly) or None,
    )


def _priced_apart(groups: tuple[ParameterGroup, ...]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each group's verdict (``costs``, ``free`` or ``undecided``, with its added time per token and the reason)
    by name, and the names of those that cost, costliest first."""
    apart: dict[str, dict[str, Any]] = {}
    for group in groups:
        outcome = check_decode_host_overhead(group.evidence, None)
        verdict = "costs" if isinstance(outcome, Finding) else "free" if isinstance(outcome, Clear) else "undecided"
        added = None if isinstance(outcome, NotTested) else outcome.evidence.get("added_ms_per_token")
        apart[group.name] = {
            "parameters": list(group.evidence.parameters),
            "verdict": verdict,
            "added_ms_per_token": added,
            "reason": outcome.rule if isinstance(outcome, Finding) else outcome.reason,
        }
    costly = sorted(
        (n for n, g in apart.items() if g["verdict"] == "costs"), key=lambda n: -(apart[n]["added_ms_per_token"] or 0.0)
    )
    return apart, costly


def _apart_rule(apart: dict[str, dict[str, Any]]) -> str:
    """The rule's account of the groups priced apart ('' when none was)."""
    if not apart:
        return ""
    by_verdict = {v: [n for n, g in apart.items() if g["verdict"] == v] for v in ("costs", "free", "undecided")}
    parts = [f"{n} {apart[n]['added_ms_per_token']:+.2f} ms per token" for n in by_verdict["costs"]]
    parts += [f"{', '.join(by_verdict[v])} {v}" for v in ("free", "undecided") if by_verdict[v]]
    if len(by_verdict["free"]) == len(apart):
        parts.append("none costs alone: together they do")
    return "; priced apart: " + "; ".join(parts)
