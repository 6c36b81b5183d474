"""``response-cached`` on hand-built evidence: cache headers first, then a replay told from generation by the
repeat's text, its server time against the varied control's, and its stream's span against the control's."""

from __future__ import annotations

from typing import Any

from latscope.checks.caching import CachedReply, CachingEvidence, check_response_cached
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from latscope.signals.cache import CacheSignal
from tests.checks.builders import REF, failed, ok

TEXT_A = "a" * 64
TEXT_B = "b" * 64
#: A generated request: 8 ms to the first token after setup, 7 gaps of 6 ms.
GENERATED: dict[str, Any] = {"ttft_after_setup_ms": 8.0, "itl_ms": (6.0,) * 7}
#: A replayed one: 0.3 ms to the first token, every token in the same read.
REPLAYED: dict[str, Any] = {"ttft_after_setup_ms": 0.3, "itl_ms": (0.0,) * 7}


def _reply(
    text: str | None, cache: CacheSignal | None = None, sample: RequestSample | None = None, **fields: Any
) -> CachedReply:
    return CachedReply(sample or ok(**fields), cache or CacheSignal(), text)


def _ev(repeat: CachedReply, first: CachedReply | None = None, control: CachedReply | None = None) -> CachingEvidence:
    return CachingEvidence(
        first=first or _reply(TEXT_A, **GENERATED),
        control=control or _reply(TEXT_B, **GENERATED),
        repeat=repeat,
    )


def test_an_x_cache_hit_on_the_repeat_is_a_medium_zero_cost_finding_with_high_confidence() -> None:
    out = check_response_cached(_ev(_reply(TEXT_A, CacheSignal(True, "HIT", "x-cache", 0), **REPLAYED)), REF)
    assert isinstance(out, Finding)
    assert out.severity is Severity.MEDIUM and out.cost_ms == 0.0 and out.confidence is Confidence.HIGH
    assert "x-cache: HIT" in out.rule and out.evidence["hit_requests"] == ["repeat"]


def test_a_hit_header_counts_even_at_generation_speed() -> None:
    # an Age on a response streamed at the decode pace still came out of a cache (it stored a stream and paces it)
    out = check_response_cached(_ev(_reply(TEXT_A, CacheSignal(True, None, "age", 30), **GENERATED)), REF)
    assert isinstance(out, Finding) and "age: 30 s" in out.rule


def test_a_replay_without_headers_is_told_by_its_text_and_timing() -> None:
    out = check_response_cached(_ev(_reply(TEXT_A, **REPLAYED)), REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM
    assert out.evidence["repeat_text_identical"] is True
    assert out.evidence["first_token_ratio"] < 0.25


def test_a_replay_whose_first_token_carries_some_path_jitter_is_still_found_by_its_stream() -> None:
    # measured across a 40 ms path: 1.7 ms of jitter left after subtracting TCP's minimum RTT, against a 5.2 ms control
    far = {"rtt_ms": 40.7}
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, ttft_after_setup_ms=42.4, itl_ms=(0.0,) * 7, **far),
            control=_reply(TEXT_B, ttft_after_setup_ms=45.9, itl_ms=(6.0,) * 7, **far),
        ),
        REF,
    )
    assert isinstance(out, Finding), out


def test_a_replay_is_found_across_a_40_ms_round_trip() -> None:
    # the round trip adds 40 ms to every first token: 40.3 against 48 ms would look alike without subtracting it
    far = {"rtt_ms": 40.0}
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, ttft_after_setup_ms=40.3, itl_ms=(0.0,) * 7, **far),
            first=_reply(TEXT_A, ttft_after_setup_ms=48.0, itl_ms=(6.0,) * 7, **far),
            control=_reply(TEXT_B, ttft_after_setup_ms=48.0, itl_ms=(6.0,) * 7, **far),
        ),
        REF,
    )
    assert isinstance(out, Finding), out


def test_deterministic_output_at_the_normal_speed_is_clear() -> None:
    out = check_response_cached(_ev(_reply(TEXT_A, **GENERATED)), REF)
    assert isinstance(out, Clear) and "deterministically" in out.reason


def test_a_prefix_cache_that_still_decodes_at_its_pace_is_clear() -> None:
    out = check_response_cached(_ev(_reply(TEXT_A, ttft_after_setup_ms=1.0, itl_ms=(6.0,) * 7)), REF)
    assert isinstance(out, Clear) and "prefix cache" in out.reason


def test_a_late_repeat_whose_tokens_came_together_is_inconclusive_and_says_how_often_it_was_sent() -> None:
    # seen on a loaded CI host: a 188 ms stall before the repeat's first token, its 8 tokens then in one read
    stalled = _reply(TEXT_A, ttft_after_setup_ms=188.2, itl_ms=(0.0,) * 7)
    out = check_response_cached(
        CachingEvidence(_reply(TEXT_A, **GENERATED), _reply(TEXT_B, **GENERATED), stalled, 3), REF
    )
    assert isinstance(out, Inconclusive) and "stall" in out.reason and "sent 3 time" in out.reason, out
    assert out.evidence["repeats_sent"] == 3


def test_a_repeat_late_only_by_a_paths_jitter_is_told_by_its_missing_cadence() -> None:
    # a fast prefill across 40 ms: the control's server time is 3.5 ms of jitter after the round trip, the replay's
    # 2.0 (0.57 of it, over the first-token share by 0.25 ms): no stall, and its tokens came together
    far = {"rtt_ms": 40.0}
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, ttft_after_setup_ms=42.0, itl_ms=(0.0,) * 7, **far),
            first=_reply(TEXT_A, ttft_after_setup_ms=43.5, itl_ms=(6.0,) * 7, **far),
            control=_reply(TEXT_B, ttft_after_setup_ms=43.5, itl_ms=(6.0,) * 7, **far),
        ),
        REF,
    )
    assert isinstance(out, Finding), out


def test_a_late_repeat_streamed_at_the_pace_is_clear() -> None:
    out = check_response_cached(_ev(_reply(TEXT_A, ttft_after_setup_ms=188.2, itl_ms=(6.0,) * 7)), REF)
    assert isinstance(out, Clear) and "deterministically" in out.reason, out


def test_a_different_text_is_clear() -> None:
    out = check_response_cached(_ev(_reply("c" * 64, **REPLAYED)), REF)
    assert isinstance(out, Clear) and "differs" in out.reason


def test_miss_headers_on_all_three_are_clear() -> None:
    miss = CacheSignal(False, "MISS", "x-cache")
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, miss, **GENERATED),
            first=_reply(TEXT_A, miss, **GENERATED),
            control=_reply(TEXT_B, miss, **GENERATED),
        ),
        REF,
    )
    assert isinstance(out, Clear) and "origin produced them" in out.reason


def test_a_fast_identical_repeat_with_too_short_streams_is_inconclusive() -> None:
    one_token: dict[str, Any] = {"itl_ms": ()}
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, ttft_after_setup_ms=0.3, **one_token),
            first=_reply(TEXT_A, ttft_after_setup_ms=8.0, **one_token),
            control=_reply(TEXT_B, ttft_after_setup_ms=8.0, **one_token),
        ),
        REF,
    )
    assert isinstance(out, Inconclusive)


def test_a_failed_request_without_hit_headers_is_not_tested() -> None:
    out = check_response_cached(_ev(_reply(None, sample=failed("cache: first repeated"))), REF)
    assert isinstance(out, NotTested) and "429" in out.reason


def test_a_control_too_fast_to_compare_is_not_tested() -> None:
    quick: dict[str, Any] = {"ttft_after_setup_ms": 0.5, "itl_ms": (0.1,) * 7}
    out = check_response_cached(
        _ev(
            _reply(TEXT_A, ttft_after_setup_ms=0.3, itl_ms=(0.0,) * 7),
            first=_reply(TEXT_A, **quick),
            control=_reply(TEXT_B, **quick),
        ),
        REF,
    )
    assert isinstance(out, NotTested) and "too fast" in out.reason


#: A fast engine across a 40 ms round trip: its first token 0.8 ms of server time after TCP's RTT is subtracted, and
#: decode at 6 ms a token.
FAST_FAR: dict[str, Any] = {"ttft_after_setup_ms": 41.5, "rtt_ms": 40.7, "itl_ms": (6.0,) * 7}


def test_a_replay_from_an_engine_too_fast_to_compare_first_tokens_is_told_by_its_missing_cadence() -> None:
    replay = _reply(TEXT_A, ttft_after_setup_ms=40.9, rtt_ms=40.7, itl_ms=(0.0,) * 7)
    out = check_response_cached(_ev(replay, first=_reply(TEXT_A, **FAST_FAR), control=_reply(TEXT_B, **FAST_FAR)), REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM, out
    assert "no decode pace" in out.rule and out.evidence["control_server_ms"] < 2.0


def test_an_identical_answer_from_an_engine_too_fast_to_compare_that_streams_at_its_pace_is_clear() -> None:
    deterministic = _reply(TEXT_A, **FAST_FAR)
    out = check_response_cached(
        _ev(deterministic, first=_reply(TEXT_A, **FAST_FAR), control=_reply(TEXT_B, **FAST_FAR)), REF
    )
    assert isinstance(out, Clear) and "decode pace" in out.reason, out


def test_no_text_to_compare_and_no_headers_is_not_tested() -> None:
    out = check_response_cached(_ev(_reply(None, **REPLAYED)), REF)
    assert isinstance(out, NotTested)


def test_an_incomplete_experiment_is_not_tested() -> None:
    assert isinstance(check_response_cached(CachingEvidence(), REF), NotTested)
