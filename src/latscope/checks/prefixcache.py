"""``prefix-cache-miss``: a long shared prompt prefix is computed anew on every request.

Mechanism: a system prompt, a tool list or the conversation so far open many requests with the same tokens. An
engine with a prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's slot cache) keeps the
KV blocks of a prefix it has computed and prefills only what follows it, so the repeat's first token costs what its
new part costs. Without one — caching off, a cache too small for the traffic, or a router that sends each turn to
another replica — every request pays the whole prefix's prefill again.

The experiment sends, per round, a prompt of a fresh prefix and a short suffix (``cold``), the same prefix with
another suffix (``warm``: what a hit serves), a prompt of the same size with a prefix never sent (``fresh``), and the
suffix's size alone (``short``: what a hit leaves to compute), all with one token generated, one after another on one
connection. Per kind the fastest answer counts (a busy host or path only adds time), as TTFT after connection setup:
the round trip is in every one of them and cancels.

* ``prefix_ms`` = fresh − short: what computing the prefix costs (cold requests count as fresh: their prefix is new
  too). Below :data:`MIN_PREFIX_MS` a hit cannot be told from a miss → not tested.
* ``saved_ms`` = fresh − warm: what repeating the prefix saved. At least :data:`HIT_SHARE` of ``prefix_ms`` → clear;
  at most :data:`MISS_SHARE` → finding; between → inconclusive (a cache that holds part of the prefix, or evicts
  under load).
* The server's own word, where its usage reports cached prompt tokens (OpenAI's ``prompt_tokens_details``,
  Anthropic's ``cache_read_input_tokens``): a warm request it says it served from cache that was no faster is
  inconclusive, not a finding; its zero cached tokens on every warm request make a finding high-confidence.

Cost: the TTFT a hit would have saved on each request that repeats the prefix, min(warm, fresh) − short (ms): the
repeat's wait beyond computing its new part (on a miss the repeat is computed as a fresh prompt is, so the fastest of
both, three requests a round, reads that work with the least noise). It grows with the prefix: a long conversation
pays it on every turn.

A prefix-cache hit is never a ``response-cached`` finding: the answer is generated anew, only the prompt's KV is
reused (that check tells a replay by its stream, which a prefix hit still decodes at the engine's pace).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

PREFIX_CACHE_ID = "prefix-cache-miss"

#: A prefix that costs less than this to compute (ms, fresh − short) leaves a hit and a miss within a busy host's
#: noise: nothing is decided.
MIN_PREFIX_MS = 3.0
#: The repeat saved at least this share of the prefix's cost: the cache held it (a hit recomputes at most the last,
#: partly filled block of the prefix and the suffix).
HIT_SHARE = 0.5
#: The repeat saved at most this share: it was computed anew.
MISS_SHARE = 0.2
#: The server says it took at least this share of the prefix from its cache: its own word for a hit.
SERVER_HIT_SHARE = 0.5
#: Rounds (every request of the round answered) needed to decide.
MIN_ROUNDS = 2


@dataclass(frozen=True, slots=True)
class PrefixRound:
    """One round of the prefix-cache experiment, each request with one token generated.

    Fields:
        cold: a fresh prefix and a short suffix (puts the prefix in a cache, if there is one).
        warm: the same prefix with another suffix: what a cache hit serves.
        fresh: a prompt of the same size whose prefix was never sent.
        short: the suffix's size alone: what a hit leaves to compute.
    """

    cold: RequestSample
    warm: RequestSample
    fresh: RequestSample
    short: RequestSample

    @property
    def samples(self) -> tuple[RequestSample, ...]:
        """The round's requests, in the order they were sent."""
        return (self.cold, self.warm, self.fresh, self.short)

    @property
    def complete(self) -> bool:
        """Every request of the round answered with a first token."""
        return all(s.ok and s.ttft_after_setup_ms is not None for s in self.samples)


@dataclass(frozen=True, slots=True)
class PrefixCacheEvidence:
    """The prefix-cache experiment (see the module docstring).

    Fields:
        prefix_tokens: the shared prefix's size (tokens, as sent; the server's chat template adds a few before it).
        suffix_tokens: the suffix's size, and the short prompt's (tokens).
        rounds: the rounds sent, in order.
        refused_at: a prefix size the server refused for its length (the experiment then halved it), None if none.
    """

    prefix_tokens: int
    suffix_tokens: int
    rounds: tuple[PrefixRound, ...] = ()
    refused_at: int | None = None


def _fastest(samples: list[RequestSample]) -> float:
    return min(s.ttft_after_setup_ms for s in samples if s.ttft_after_setup_ms is not None)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def server_says_hit(warm: list[RequestSample], prefix_tokens: int) -> bool | None:
    """The server's own word on the warm requests: True when one reports at least :data:`SERVER_HIT_SHARE` of the
    prefix as cached tokens, False when every one reports none cached, None when they do not say."""
    reported = [s.cached_tokens for s in warm if s.cached_tokens is not None]
    if not reported:
        return None
    if max(reported) >= SERVER_HIT_SHARE * prefix_tokens:
        return True
    return False if len(reported) == len(warm) and max(reported) == 0 else None


def check_prefix_cache_miss(ev: PrefixCacheEvidence, reference: Reference | None) -> Outcome:
    """Finding when repeating a long prefix saved at most :data:`MISS_SHARE` of what computing it costs; clear at
    :data:`HIT_SHARE` or more (see the module docstring)."""
    sent = [s for r in ev.rounds for s in r.samples]
    broken = failures.too_many_failed(sent)
    if broken or not sent:
        return NotTested(PREFIX_CACHE_ID, f"the target misbehaved during the prefix-cache rounds: {broken or 'none'}")
    rounds = [r for r in ev.rounds if r.complete]
    if len(rounds) < MIN_ROUNDS:
        return NotTested(
            PREFIX_CACHE_ID,
            f"{len(rounds)} of {len(ev.rounds)} prefix-cache rounds answered every request; {MIN_ROUNDS} are needed",
        )
    warm = [r.warm for r in rounds]
    fresh_ms = _fastest([s for r in rounds for s in (r.cold, r.fresh)])
    warm_ms = _fastest(warm)
    short_ms = _fastest([r.short for r in rounds])
    prefix_ms = fresh_ms - short_ms
    saved_ms = fresh_ms - warm_ms
    server_hit = server_says_hit(warm, ev.prefix_tokens)
    evidence: dict[str, Any] = {
        "prefix_tokens": ev.prefix_tokens,
        "suffix_tokens": ev.suffix_tokens,
        "rounds": len(rounds),
        "fresh_ttft_ms": _round(fresh_ms),
        "warm_ttft_ms": _round(warm_ms),
        "short_ttft_ms": _round(short_ms),
        "prefix_ms": _round(prefix_ms),
        "saved_ms": _round(saved_ms),
        "warm_ttfts_ms": [_round(s.ttft_after_setup_ms) for s in warm],
        "cached_tokens": [s.cached_tokens for s in warm],
        "refused_at_tokens": ev.refused_at,
    }
    if prefix_ms < MIN_PREFIX_MS:
        return NotTested(
            PREFIX_CACHE_ID,
            f"a {ev.prefix_tokens}-token prefix costs {prefix_ms:.1f} ms to compute here (TTFT {fresh_ms:.1f} ms "
            f"against {short_ms:.1f} ms for the {ev.suffix_tokens}-token suffix alone): too little to tell a cache "
            f"hit from a miss",
        )
    share = saved_ms / prefix_ms
    evidence["saved_share"] = round(share, 3)
    said = "" if server_hit is None else (" (the server reports cached tokens)" if server_hit else "")
    if share >= HIT_SHARE:
        return Clear(
            PREFIX_CACHE_ID,
            f"a repeated {ev.prefix_tokens}-token prefix answered in {warm_ms:.1f} ms against {fresh_ms:.1f} ms "
            f"fresh: the cache saved {share:.0%} of the prefix's {prefix_ms:.1f} ms{said}",
            evidence,
        )
    if share > MISS_SHARE:
        return Inconclusive(
            PREFIX_CACHE_ID,
            f"a repeated {ev.prefix_tokens}-token prefix saved {share:.0%} of its {prefix_ms:.1f} ms: part of it "
            "cached (a cache too small for the traffic, evicting, or larger blocks than the prefix fills)",
            evidence,
        )
    if server_hit:
        return Inconclusive(
            PREFIX_CACHE_ID,
            f"the server reports the repeated prefix as cached ({max(s.cached_tokens or 0 for s in warm)} tokens), "
            f"yet it answered in {warm_ms:.1f} ms against {fresh_ms:.1f} ms fresh",
            evidence,
        )
    # a miss computes the repeat as it computes a fresh prompt of its size: the fastest of all of them (three per
    # round, not one) is the cleanest reading of that work on a busy host or path
    recomputed_ms = min(warm_ms, fresh_ms)
    cost = max(0.0, recomputed_ms - short_ms)
    confirmed = server_hit is False
    return costed_finding(
        PREFIX_CACHE_ID,
        cost,
        reference,
        cost_basis=(
            f"ms each request that repeats a {ev.prefix_tokens}-token prefix waits to compute it again: the TTFT of "
            f"a prompt of its size computed anew, {recomputed_ms:.1f} ms (fastest of the repeats and the fresh ones), "
            f"less the {short_ms:.1f} ms its {ev.suffix_tokens} new tokens cost alone; it grows with the prefix"
        ),
        evidence=evidence,
        rule=(
            f"a repeated {ev.prefix_tokens}-token prefix saved {share:.0%} (≤ {MISS_SHARE:.0%}) of the "
            f"{prefix_ms:.1f} ms a fresh one costs ({len(rounds)} rounds, fastest of each kind)"
            + ("; the server reports 0 cached tokens" if confirmed else "")
        ),
        confidence=Confidence.HIGH if confirmed or len(rounds) >= 3 else Confidence.MEDIUM,
    )
