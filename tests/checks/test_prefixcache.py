"""prefix-cache-miss: a repeated long prefix against fresh prompts of its size and the suffix alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.checks.prefixcache import (
    HIT_SHARE,
    MIN_PREFIX_MS,
    MISS_SHARE,
    PrefixCacheEvidence,
    PrefixRound,
    check_prefix_cache_miss,
)
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested
from tests.checks.builders import REF, failed, ok


def _round(cold: float, warm: float, fresh: float, short: float, *, cached: int | None = None) -> PrefixRound:
    return PrefixRound(
        ok("prefix cold", ttft_after_setup_ms=cold),
        ok("prefix warm", ttft_after_setup_ms=warm, cached_tokens=cached),
        ok("prefix fresh", ttft_after_setup_ms=fresh),
        ok("prefix short", ttft_after_setup_ms=short),
    )


def _evidence(*rounds: PrefixRound) -> PrefixCacheEvidence:
    return PrefixCacheEvidence(prefix_tokens=2048, suffix_tokens=32, rounds=rounds)


def test_a_repeated_prefix_that_costs_what_a_fresh_one_does_is_a_miss_priced_at_what_a_hit_saves() -> None:
    # no cache: the repeat pays the whole prefix again (fresh 110 ms, the suffix alone 12)
    ev = _evidence(_round(112.0, 111.0, 110.0, 12.0), _round(115.0, 113.0, 111.0, 13.0))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, Finding)
    # the fastest prompt of the whole size computed anew (the fresh 110) less the fastest short
    assert outcome.cost_ms == pytest.approx(110.0 - 12.0)
    assert outcome.evidence["saved_share"] <= MISS_SHARE
    assert outcome.confidence is Confidence.MEDIUM  # two rounds, and the server said nothing


def test_a_miss_is_priced_by_every_prompt_computed_anew_so_two_late_repeats_do_not_inflate_it() -> None:
    # both repeats met a busy host (+10 ms each: 51 against 41 was seen across a 20 ms path); the fresh and cold
    # prompts of the same size were on time, and on a miss they are the same work
    ev = _evidence(_round(52.0, 61.0, 53.0, 12.0), _round(53.0, 62.0, 52.5, 12.5))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, Finding), outcome
    assert outcome.cost_ms == pytest.approx(52.0 - 12.0)
    assert "52.0 ms" in outcome.cost_basis


def test_the_servers_zero_cached_tokens_make_a_miss_high_confidence() -> None:
    ev = _evidence(_round(112.0, 111.0, 110.0, 12.0, cached=0), _round(115.0, 113.0, 111.0, 13.0, cached=0))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, Finding) and outcome.confidence is Confidence.HIGH
    assert "0 cached tokens" in outcome.rule


def test_a_prefix_served_from_cache_is_clear() -> None:
    # vLLM with prefix caching on: ~20 ms for the repeat against ~110 ms fresh
    ev = _evidence(_round(110.0, 21.0, 112.0, 12.0, cached=1920), _round(111.0, 20.0, 109.0, 13.0, cached=1920))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, Clear), outcome
    assert outcome.evidence["saved_share"] >= HIT_SHARE


def test_a_cache_that_saves_part_of_the_prefix_is_inconclusive() -> None:
    ev = _evidence(_round(110.0, 70.0, 110.0, 10.0), _round(110.0, 71.0, 110.0, 10.0))  # 40 % saved
    assert isinstance(check_prefix_cache_miss(ev, REF), Inconclusive)


def test_a_server_that_says_it_cached_the_prefix_yet_was_no_faster_is_inconclusive_not_a_miss() -> None:
    ev = _evidence(_round(110.0, 109.0, 110.0, 10.0, cached=2048), _round(111.0, 110.0, 111.0, 10.0, cached=2048))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, Inconclusive) and "reports the repeated prefix as cached" in outcome.reason


def test_a_prefix_that_costs_nothing_to_compute_decides_nothing() -> None:
    ev = _evidence(_round(5.0, 5.1, 5.0, 4.0), _round(5.2, 5.0, 5.1, 4.1))
    outcome = check_prefix_cache_miss(ev, REF)
    assert isinstance(outcome, NotTested) and "too little to tell" in outcome.reason


def test_a_late_warm_answer_does_not_hide_a_hit_the_other_round_showed() -> None:
    # one warm request met a busy host (the fastest of each kind counts)
    ev = _evidence(_round(110.0, 150.0, 112.0, 12.0), _round(111.0, 20.0, 109.0, 13.0))
    assert isinstance(check_prefix_cache_miss(ev, REF), Clear)


def test_too_few_complete_rounds_and_failures_are_not_tested() -> None:
    one = _evidence(_round(110.0, 110.0, 110.0, 10.0))
    assert isinstance(check_prefix_cache_miss(one, REF), NotTested)
    broken = PrefixRound(failed("prefix cold"), failed("prefix warm"), ok("fresh", ttft_after_setup_ms=1.0), ok("s"))
    outcome = check_prefix_cache_miss(_evidence(broken, broken), REF)
    assert isinstance(outcome, NotTested) and "misbehaved" in outcome.reason


def _sample(label: str, ms: float) -> RequestSample:
    return ok(label, ttft_after_setup_ms=ms)


@given(
    prefix_ms=st.floats(min_value=MIN_PREFIX_MS * 2, max_value=5000.0),
    short_ms=st.floats(min_value=0.5, max_value=200.0),
    saved_share=st.floats(min_value=0.0, max_value=1.0),
    noise=st.lists(st.floats(min_value=0.0, max_value=50.0), min_size=8, max_size=8),
)
def test_the_outcome_follows_the_share_of_the_prefix_the_repeat_saved(
    prefix_ms: float, short_ms: float, saved_share: float, noise: list[float]
) -> None:
    fresh = short_ms + prefix_ms
    warm = fresh - saved_share * prefix_ms
    # noise only adds, and every kind has one request without it: the floors are the truth
    rounds = (
        _round(fresh + noise[0], warm + noise[1], fresh + noise[2], short_ms + noise[3]),
        _round(fresh, warm, fresh, short_ms),
    )
    outcome = check_prefix_cache_miss(_evidence(*rounds), REF)
    share = outcome.evidence["saved_share"] if not isinstance(outcome, NotTested) else None
    assert share == pytest.approx(saved_share, abs=1e-3)
    if saved_share >= HIT_SHARE + 1e-3:
        assert isinstance(outcome, Clear)
    elif saved_share <= MISS_SHARE - 1e-3:
        assert isinstance(outcome, Finding)
        assert outcome.cost_ms == pytest.approx(warm - short_ms, rel=1e-6, abs=1e-6)
    elif MISS_SHARE + 1e-3 < saved_share < HIT_SHARE - 1e-3:
        assert isinstance(outcome, Inconclusive)
