"""The engine checks on hand-built evidence: ``batching-window``, ``prefill-superlinear``, ``capacity-saturation``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from latscope.checks.batching import BatchingEvidence, PairPoint, check_batching_window
from latscope.checks.kvcache import KvEvidence, check_kv_cache_pressure
from latscope.checks.prefill import PrefillEvidence, PrefillPoint, check_prefill_superlinear, floor_points
from latscope.checks.samples import RequestSample
from latscope.checks.sampling import GROUP_FIXES, ParameterGroup, SamplingEvidence, check_decode_host_overhead
from latscope.checks.saturation import SaturationEvidence, SaturationLevel, check_capacity_saturation
from latscope.findings import CATALOGUE, Clear, Finding, Inconclusive, NotTested, Severity
from latscope.timeline.model import ServerPhase
from tests.checks.builders import REF, failed, ok


# -- batching-window ---------------------------------------------------------------------------------------------
def _pairs(window_ms: float, offsets: list[float], jitter_ms: float = 0.4) -> tuple[PairPoint, ...]:
    """Pairs as a window of ``window_ms`` gives them: within it the second joins the first's batch."""
    return tuple(PairPoint(o, jitter_ms if o < window_ms else o + 2.0) for o in offsets)


def test_pairs_that_start_together_below_an_offset_reveal_the_window_and_bound_its_length() -> None:
    ev = BatchingEvidence(16, alone_ms=(53.0, 54.0, 55.0), pairs=_pairs(50.0, [16, 32, 48, 16, 32, 52, 50, 49]))
    out = check_batching_window(ev, REF)
    assert isinstance(out, Finding) and out.severity is Severity.HIGH
    assert out.evidence["window_lower_ms"] == 49 and out.evidence["window_upper_ms"] == 50
    assert out.cost_ms == pytest.approx(49.5)


def test_when_every_pair_started_together_the_idle_wait_bounds_the_window() -> None:
    ev = BatchingEvidence(16, alone_ms=(42.0, 43.0), pairs=_pairs(60.0, [10, 20, 35]), rtt_ms=2.0)
    out = check_batching_window(ev, REF)
    assert isinstance(out, Finding) and out.evidence["window_upper_ms"] == 40.0  # 42 alone less the 2 ms round trip
    assert out.cost_ms == pytest.approx((35 + 40) / 2)


def test_a_fixed_per_request_cost_never_closes_the_gap_between_first_tokens() -> None:
    # a slow gateway hop of 50 ms on every request: each pair's second first token comes the offset later
    ev = BatchingEvidence(16, alone_ms=(55.0, 56.0), pairs=tuple(PairPoint(o, o + 0.3) for o in (15, 30, 45, 15)))
    out = check_batching_window(ev, REF)
    assert isinstance(out, Clear) and "0 of 4" in out.reason


def test_a_server_answering_at_once_has_no_room_for_a_window() -> None:
    out = check_batching_window(BatchingEvidence(16, alone_ms=(3.0, 3.2), rtt_ms=0.5), REF)
    assert isinstance(out, Clear) and "no room" in out.reason


def test_pairs_together_at_random_offsets_are_inconclusive() -> None:
    pairs = (PairPoint(10, 12.0), PairPoint(20, 0.5), PairPoint(30, 33.0), PairPoint(40, 44.0), PairPoint(15, 17.0))
    out = check_batching_window(BatchingEvidence(16, alone_ms=(50.0,), pairs=pairs), REF)
    assert isinstance(out, Inconclusive)


def test_batching_not_tested_when_requests_failed() -> None:
    out = check_batching_window(BatchingEvidence(16, failures=(failed(), failed())), REF)
    assert isinstance(out, NotTested) and "429" in out.reason


# -- prefill-superlinear -----------------------------------------------------------------------------------------
SIZES = (16, 512, 1024, 2048, 4096, 8192, 16384)


def _prefill(c: float, b: float = 0.02, a: float = 5.0, sizes: tuple[int, ...] = SIZES) -> PrefillEvidence:
    return PrefillEvidence(points=tuple(PrefillPoint(n, a + b * n + c * n * n) for n in sizes))


def test_a_quadratic_prefill_is_found_and_costed_by_its_quadratic_part_at_the_longest_prompt() -> None:
    out = check_prefill_superlinear(_prefill(1e-5, sizes=SIZES[:-1]), REF)
    assert isinstance(out, Finding) and out.evidence["longest_prompt_tokens"] == 8192
    assert out.cost_ms == pytest.approx(1e-5 * 8192**2, rel=1e-6)
    assert "c·n²" in out.cost_basis


def test_an_efficient_kernel_is_clear() -> None:
    out = check_prefill_superlinear(_prefill(2.5e-7, b=0.04), REF)  # the lab's tuned default: 9 % at 16k
    assert isinstance(out, Clear) and "linearly" in out.reason


def test_a_modest_bend_is_inconclusive_not_a_finding() -> None:
    out = check_prefill_superlinear(_prefill(4e-7), REF)  # 24 % of TTFT at 16k
    assert isinstance(out, Inconclusive)


def test_a_bend_lost_in_noise_is_not_reported() -> None:
    noisy = [
        PrefillPoint(n, 5 + 0.02 * n + 1e-5 * n * n + (400.0 if i % 2 else -400.0)) for i, n in enumerate(SIZES[:-2])
    ]
    out = check_prefill_superlinear(PrefillEvidence(points=tuple(noisy)), REF)
    assert not isinstance(out, Finding)


def test_one_late_answer_at_the_longest_prompt_is_not_read_as_curvature() -> None:
    # a host busy for 280 ms during one of the two 8192-token prompts: the fit takes each size's fastest repeat
    clean = _prefill(5e-6, sizes=SIZES[:-1]).points
    late = PrefillPoint(8192, clean[-1].ttft_ms + 280.0)
    out = check_prefill_superlinear(PrefillEvidence(points=(*clean[:-1], late, clean[-1])), REF)
    assert isinstance(out, Finding) and out.evidence["longest_repeats"] == 2
    assert out.cost_ms == pytest.approx(5e-6 * 8192**2, rel=1e-6)
    alone = check_prefill_superlinear(PrefillEvidence(points=(*clean[:-1], late)), REF)
    assert isinstance(alone, Finding) and alone.cost_ms > 1.5 * out.cost_ms  # what the repeat is there for


def test_repeats_a_few_tokens_apart_are_one_size() -> None:
    points = (PrefillPoint(4096, 90.0), PrefillPoint(4101, 80.0), PrefillPoint(512, 12.0), PrefillPoint(8192, 300.0))
    assert floor_points(points) == [PrefillPoint(512, 12.0), PrefillPoint(4101, 80.0), PrefillPoint(8192, 300.0)]


def test_a_short_context_leaves_prefill_not_tested_with_the_limit() -> None:
    out = check_prefill_superlinear(
        PrefillEvidence(points=_prefill(1e-5, sizes=(16, 128, 512)).points, refused_at=1024), REF
    )
    assert isinstance(out, NotTested) and "refused 1024" in out.reason


# -- capacity-saturation ---------------------------------------------------------------------------------------
def _request(ttft: float, e2e: float | None = None) -> RequestSample:
    return ok(ttft_after_setup_ms=ttft, e2e_after_setup_ms=e2e if e2e is not None else ttft + 100.0)


def _level(concurrency: int, slots: int, ttft: float = 5.0, service: float = 100.0) -> SaturationLevel:
    """Requests as an engine with ``slots`` slots serves a burst: the first ``slots`` start at once, the rest wait
    for them to finish."""
    burst = tuple(_request(ttft + (0.0 if i < slots else service) + 0.1 * i) for i in range(concurrency))
    return SaturationLevel(concurrency, (burst, burst))


def test_requests_past_the_engine_slots_waiting_give_the_capacity_and_its_cost() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    ev = SaturationEvidence(16, 16, (lone, _level(2, 4), _level(4, 4), _level(8, 4)))
    out = check_capacity_saturation(ev, REF)
    assert isinstance(out, Finding) and out.evidence["capacity"] == 4 and out.evidence["waited_at"] == 8
    assert out.cost_ms == pytest.approx(50.35, abs=0.5)  # half the burst waited one 100 ms request, none at 4


def test_continuous_batching_within_its_budget_is_clear() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    levels = (lone, *(_level(c, 256, ttft=5.0 + c) for c in (2, 4, 8, 16)))
    out = check_capacity_saturation(SaturationEvidence(16, 16, levels), REF)
    assert isinstance(out, Clear) and "up to 16" in out.reason


def test_one_stalled_request_is_not_a_queue() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    stalled = (_request(90.0), *(_request(6.0) for _ in range(7)))
    calm = tuple(_request(6.0) for _ in range(8))
    out = check_capacity_saturation(SaturationEvidence(16, 16, (lone, SaturationLevel(8, (stalled, calm)))), REF)
    assert isinstance(out, Clear)


def test_a_lone_request_with_no_stream_to_wait_for_is_not_tested() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 7.0),) * 3,))
    out = check_capacity_saturation(SaturationEvidence(16, 1, (lone, _level(2, 1))), REF)
    assert isinstance(out, NotTested) and "too little service time" in out.reason


def test_slow_first_tokens_that_came_together_did_not_wait_for_a_slot() -> None:
    # a busy host delays every first token of the burst past the TTFT threshold, but alike: none came a good part of
    # a stream after the burst's first one
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    slow = tuple(_request(70.0 + i) for i in range(8))
    together = (-1.0, *(float(i) for i in range(1, 8)))
    level = SaturationLevel(8, (slow, slow), (together, together))
    out = check_capacity_saturation(SaturationEvidence(16, 16, (lone, level)), REF)
    assert isinstance(out, Clear)
    # half of them got their first token a whole stream after the first ones: they waited, whatever the TTFTs say
    # about the order in which the earlier streams were delivered
    apart = (0.0, 0.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0)
    waiting = SaturationLevel(8, (slow, slow), (apart, apart))
    found = check_capacity_saturation(SaturationEvidence(16, 16, (lone, _level(4, 4), waiting)), REF)
    assert isinstance(found, Finding) and found.evidence["capacity"] == 4


def test_a_first_token_one_prefill_late_is_a_batching_step_not_a_wait_for_a_slot() -> None:
    # short streams (18 ms) whose prefill (20 ms) is as long: a continuous-batching engine that started the second
    # request one prefill step after the first delays its first token by a prefill; out of slots, by a whole request
    lone = SaturationLevel(1, ((_request(20.0, 38.0),) * 3,))
    burst = (_request(20.0, 38.0), _request(40.0, 58.0))
    one_step = SaturationLevel(2, (burst, burst), ((-20.0, 20.0), (-20.0, 20.0)))
    assert isinstance(check_capacity_saturation(SaturationEvidence(16, 16, (lone, one_step)), REF), Clear)
    serial = (_request(20.0, 38.0), _request(58.0, 76.0))
    whole_request = SaturationLevel(2, (serial, serial), ((-38.0, 38.0), (-38.0, 38.0)))
    found = check_capacity_saturation(SaturationEvidence(16, 16, (lone, whole_request)), REF)
    assert isinstance(found, Finding) and found.evidence["capacity"] == 1


def test_first_tokens_spread_while_the_servers_own_queue_stayed_empty_is_no_wait_for_a_slot() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    levels = (lone, _level(4, 4), _level(8, 4))
    empty = tuple((0.05 * i, 8.0, 0.0) for i in range(10))
    out = check_capacity_saturation(SaturationEvidence(16, 16, levels, waiting_gauge=0.0, batch_series=empty), REF)
    assert isinstance(out, Clear) and "stayed at 0 over 10 scrapes" in out.reason
    queued = tuple((0.05 * i, 4.0, 4.0) for i in range(10))
    found = check_capacity_saturation(SaturationEvidence(16, 16, levels, waiting_gauge=4.0, batch_series=queued), REF)
    assert isinstance(found, Finding) and found.evidence["capacity"] == 4


def _reporting(level: SaturationLevel, queue_share: float) -> SaturationLevel:
    """``level`` with the server reporting ``queue_share`` of each request's wait beyond 5 ms as queue time."""

    def reported(s: RequestSample) -> RequestSample:
        wait = max(0.0, (s.ttft_after_setup_ms or 0.0) - 5.0)
        return replace(s, server_ms={ServerPhase.QUEUE: queue_share * wait, ServerPhase.PREFILL: 2.0})

    return replace(level, rounds=tuple(tuple(reported(s) for s in burst) for burst in level.rounds))


def test_requests_that_waited_before_reaching_the_server_did_not_wait_for_a_slot() -> None:
    lone = SaturationLevel(1, ((_request(5.0, 105.0),) * 3,))
    gateway = (lone, _reporting(_level(4, 4), 0.0), _reporting(_level(8, 4), 0.0))
    out = check_capacity_saturation(SaturationEvidence(16, 16, gateway), REF)
    assert isinstance(out, Clear) and "before reaching the server" in out.reason
    engine = (lone, _reporting(_level(4, 4), 1.0), _reporting(_level(8, 4), 1.0))
    found = check_capacity_saturation(SaturationEvidence(16, 16, engine), REF)
    assert isinstance(found, Finding) and found.evidence["reported_queue_share"] == pytest.approx(1.0, abs=0.01)


# -- kv-cache-pressure -------------------------------------------------------------------------------------------
def _stream(gaps: list[float], ttft: float = 20.0) -> RequestSample:
    return ok(ttft_after_setup_ms=ttft, itl_ms=tuple(gaps))


STEADY = [6.0] * 60


def _kv(burst: list[RequestSample], **metrics: object) -> KvEvidence:
    return KvEvidence(768, 256, 8, alone=(_stream(STEADY),), burst=tuple(burst), **metrics)  # type: ignore[arg-type]


def test_streams_stalled_mid_decode_with_preemptions_are_kv_pressure_costed_by_the_stall() -> None:
    victims = [_stream([*STEADY[:30], 600.0, *STEADY[:29]]), _stream([*STEADY[:40], 400.0, *STEADY[:19]])]
    ev = _kv([*victims, *(_stream(STEADY) for _ in range(6))], preemptions=2.0, kv_usage_max=0.99)
    out = check_kv_cache_pressure(ev, REF)
    assert isinstance(out, Finding) and out.confidence.value == "high"
    assert out.cost_ms == pytest.approx(((600 - 6) + (400 - 6)) / 2)  # two preemptions, two stalls
    assert "2 preemption" in out.rule


def test_a_load_that_never_filled_the_cache_tests_nothing() -> None:
    out = check_kv_cache_pressure(_kv([_stream(STEADY) for _ in range(8)], preemptions=0.0, kv_usage_max=0.03), REF)
    assert isinstance(out, NotTested) and "3%" in out.reason


def test_a_full_cache_without_stalls_is_clear() -> None:
    out = check_kv_cache_pressure(_kv([_stream(STEADY) for _ in range(8)], preemptions=0.0, kv_usage_max=0.95), REF)
    assert isinstance(out, Clear)


def test_stalls_a_prefill_of_a_neighbour_explains_are_not_stalls() -> None:
    # a 25 ms gap when another request was admitted: under the 8 × 20 ms prefill of the whole burst
    out = check_kv_cache_pressure(_kv([_stream([*STEADY[:10], 25.0, *STEADY[:49]]) for _ in range(8)]), REF)
    assert isinstance(out, NotTested) and "no KV metrics" in out.reason


def test_stalls_while_the_server_reports_a_cache_far_from_full_are_not_its_cache() -> None:
    stalled = [_stream([*STEADY[:30], 500.0, *STEADY[:29]]) for _ in range(3)]
    out = check_kv_cache_pressure(_kv(stalled, preemptions=0.0, kv_usage_max=0.2), REF)
    assert isinstance(out, NotTested) and "3 stream(s) stalled for other reasons" in out.reason
    denied = check_kv_cache_pressure(_kv(stalled, preemptions=0.0), REF)  # a counter but no usage gauge
    assert isinstance(denied, Inconclusive)


def test_stalls_without_metrics_are_a_medium_confidence_finding() -> None:
    stalled = [_stream([*STEADY[:30], 500.0, *STEADY[:29]]) for _ in range(3)]
    out = check_kv_cache_pressure(_kv(stalled), REF)
    assert isinstance(out, Finding) and out.confidence.value == "medium"


# -- decode-host-overhead ----------------------------------------------------------------------------------------
def _tpot_streams(tpot: float, n: int = 3, tokens: int = 32) -> tuple[RequestSample, ...]:
    return tuple(ok(itl_ms=tuple(tpot + 0.05 * ((i + k) % 3) for k in range(tokens - 1))) for i in range(n))


PARAMS = ("top_p", "frequency_penalty", "logprobs")


def test_sampling_that_adds_per_token_time_is_found_and_costed_over_the_stream() -> None:
    ev = SamplingEvidence(32, greedy=_tpot_streams(6.0), sampled=_tpot_streams(11.0), parameters=PARAMS)
    out = check_decode_host_overhead(ev, REF)
    assert isinstance(out, Finding) and out.evidence["added_ms_per_token"] == pytest.approx(5.0)
    assert out.cost_ms == pytest.approx(5.0 * 31)


def _group(name: str, tpot: float, greedy: float = 6.0) -> ParameterGroup:
    return ParameterGroup(name, SamplingEvidence(32, _tpot_streams(greedy), _tpot_streams(tpot), (name,)))


def test_the_groups_priced_apart_name_the_one_that_costs_and_its_fix() -> None:
    groups = (_group("nucleus", 6.0), _group("penalties", 6.05), _group("logprobs", 11.0))
    ev = SamplingEvidence(32, _tpot_streams(6.0), _tpot_streams(11.0), PARAMS, groups=groups)
    out = check_decode_host_overhead(ev, REF)
    assert isinstance(out, Finding)
    assert {n: g["verdict"] for n, g in out.evidence["by_parameter"].items()} == {
        "nucleus": "free",
        "penalties": "free",
        "logprobs": "costs",
    }
    assert out.fix == GROUP_FIXES["logprobs"] and "logprobs +5.00 ms per token" in out.rule, out.rule


def test_a_set_whose_groups_are_free_alone_keeps_the_catalogue_fix_and_says_so() -> None:
    groups = (_group("nucleus", 6.0), _group("logprobs", 6.05))
    out = check_decode_host_overhead(
        SamplingEvidence(32, _tpot_streams(6.0), _tpot_streams(11.0), PARAMS, groups=groups), REF
    )
    assert isinstance(out, Finding) and out.fix == CATALOGUE["decode-host-overhead"].fix
    assert "none costs alone" in out.rule, out.rule


def test_sampling_on_the_fast_path_is_clear() -> None:
    ev = SamplingEvidence(32, greedy=_tpot_streams(6.0), sampled=_tpot_streams(6.1), parameters=PARAMS)
    assert isinstance(check_decode_host_overhead(ev, REF), Clear)


def test_a_difference_inside_the_noise_is_neither_a_finding_nor_clear() -> None:
    # the host's load swings each stream by 5 ms; pair by pair, sampling is as often faster as slower
    greedy = tuple(ok(itl_ms=(v,) * 10) for v in (4.0, 9.0, 5.0, 10.0))
    sampled = tuple(ok(itl_ms=(v,) * 10) for v in (9.5, 4.5, 10.5, 5.5))
    out = check_decode_host_overhead(SamplingEvidence(11, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive) and "rule that out" in out.reason, out


def test_a_median_under_the_line_with_pairs_that_spread_over_it_is_not_clear() -> None:
    # llama-cpp-python's three pairs on a busy host: +0.16, +0.79 and -0.11 ms per token over greedy's 1.4-1.9 ms
    greedy = _tpots_ms([1.905, 1.37, 1.648], tokens=16)
    sampled = _tpots_ms([2.064, 2.158, 1.541], tokens=16)
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive), out
    assert out.evidence["added_ms_per_token"] < 0.1 * out.evidence["greedy_tpot_ms"]
    # the same median with pairs that agree is the fast path
    steady = _tpots_ms([1.905, 1.37, 1.648], tokens=16), _tpots_ms([2.06, 1.53, 1.80], tokens=16)
    calm = check_decode_host_overhead(SamplingEvidence(16, greedy=steady[0], sampled=steady[1], parameters=PARAMS), REF)
    assert isinstance(calm, Clear), calm


def _tpots_ms(values: list[float], tokens: int = 32) -> tuple[RequestSample, ...]:
    return tuple(ok(itl_ms=(v,) * (tokens - 1)) for v in values)


def test_a_cost_the_host_load_hides_between_streams_shows_pair_by_pair() -> None:
    # measured on llama-cpp-python here: greedy streams took 0.89-1.27 ms per token as the host's load moved, more
    # than the sampling cost; every pair sent back to back still shows it (+0.08 to +0.55 ms)
    greedy = _tpots_ms([0.887, 1.075, 1.067, 1.228, 1.266])
    sampled = _tpots_ms([1.124, 1.154, 1.368, 1.564, 1.817])
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    assert out.evidence["added_ms_per_token"] == pytest.approx(0.301, abs=1e-3)  # the pairs' median
    assert out.cost_ms == pytest.approx(0.301 * 31, abs=0.05)


def test_a_material_difference_the_noise_could_have_made_is_inconclusive_not_clear() -> None:
    # measured on llama-cpp-python here (a CI run): pairs of +0.37 ms in the median, but -0.14 to +0.69 ms apart
    greedy = _tpots_ms([1.575, 1.072, 1.123, 1.667, 1.436])
    sampled = _tpots_ms([1.431, 1.439, 1.543, 2.353, 1.56])
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive), out
    assert "standard errors" in out.reason


def test_a_fast_path_that_one_pair_of_three_contradicts_is_inconclusive_not_clear() -> None:
    # a CI run at 20 ms one way: llama-cpp-python's greedy streams held their tokens back 3-7 ms, which moved their
    # time per token by as much as sampling costs; the first pair showed the cost in full, the other two did not
    greedy = _tpots_ms([0.81, 0.879, 0.844], tokens=16)
    sampled = _tpots_ms([1.046, 0.893, 0.87], tokens=16)
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive) and "1 of 3 pairs" in out.reason, out
    # one such pair among five that agree on the fast path is the host's load, as a miss is for a finding
    greedy5 = _tpots_ms([0.81, 0.879, 0.844, 0.85, 0.83], tokens=16)
    sampled5 = _tpots_ms([1.046, 0.893, 0.87, 0.86, 0.85], tokens=16)
    calm = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy5, sampled=sampled5, parameters=PARAMS), REF)
    assert isinstance(calm, Clear), calm


def test_a_difference_that_some_pairs_do_not_show_is_inconclusive() -> None:
    # measured at 50 ms one way on a busy host: the medians differ by 10 % with a tiny spread in each group, but the
    # third pair, sent back to back, shows no difference at all; a per-step cost would show in every pair
    greedy = tuple(ok(itl_ms=(v,) * 15) for v in (5.05, 5.85, 5.83))
    sampled = tuple(ok(itl_ms=(v,) * 15) for v in (6.48, 6.44, 5.83))
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive), out
    assert out.evidence["pair_differences_ms"] == [1.43, 0.59, 0.0]


def test_one_pair_of_five_held_up_by_the_host_does_not_undo_a_finding_but_two_do() -> None:
    # a 5 ms stall inside one greedy stream of 16 tokens moves its mean by 0.33 ms: that pair shows no difference
    greedy_tpots = [1.0, 1.0, 1.33, 1.0, 1.0]
    sampled = tuple(ok(itl_ms=(1.25,) * 15) for _ in greedy_tpots)
    greedy = tuple(ok(itl_ms=(v,) * 15) for v in greedy_tpots)
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    twice = tuple(ok(itl_ms=(v,) * 15) for v in [1.0, 1.33, 1.33, 1.0, 1.0])
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=twice, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive), out
    assert "2 of 5 pairs" in out.reason


def test_two_pairs_of_eight_held_up_by_the_host_do_not_undo_a_finding_but_three_do() -> None:
    # measured on llama-cpp-python here, after the experiment's three extra pairs: +0.46 ms per token in the median,
    # two pairs of eight at +0.09 and -0.02 ms (a stall in one of their streams)
    greedy = _tpots_ms([1.0] * 8)
    differences = [0.379, 0.086, 1.131, 0.544, -0.023, 0.632, 0.63, 0.229]
    sampled = _tpots_ms([1.0 + d for d in differences])
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    steady = _tpots_ms([1.5] * 5 + [1.0] * 3)  # +0.5 ms in five pairs, nothing in three
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=steady, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive) and "3 of 8 pairs" in out.reason, out


def test_a_cost_near_the_pairs_noise_that_nearly_every_pair_leans_towards_is_found() -> None:
    # measured on llama-cpp-python here after a whole diagnosis: 20 pairs, +0.17 ms per token in the median over
    # greedy's 1.1 ms; 8 pairs under half the 0.11 ms line (more than one in four), but 16 of 20 slower at all
    differences = [0.284, -0.101, 0.197, -0.084, 0.234, 0.331, 0.179, 0.053, 0.136, 0.26]
    differences += [-0.128, 0.015, 0.037, 0.309, 0.618, 0.169, 0.354, 0.373, 0.018, -0.045]
    greedy = _tpots_ms([1.1] * 20)
    sampled = _tpots_ms([1.1 + d for d in differences])
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    assert out.evidence["pairs_slower"] == 16 and out.evidence["sign_test_p"] < 0.01
    assert "16 of 20 pairs slower" in out.rule


def test_a_cost_that_only_some_pairs_carry_is_not_found_however_many_pairs() -> None:
    # eleven pairs at +0.3 ms per token, nine scattered about nothing: the median is +0.3, but nine pairs did not
    # show a per-step cost at all and only four of them leaned its way, as often as noise does
    differences = [0.3] * 11 + [0.02, -0.03, 0.01, -0.02, 0.03, -0.01, 0.04, -0.04, -0.05]
    greedy = _tpots_ms([1.1] * 20)
    sampled = _tpots_ms([1.1 + d for d in differences])
    out = check_decode_host_overhead(SamplingEvidence(32, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Inconclusive) and "9 of 20 pairs" in out.reason and "only 15" in out.reason, out


def test_tokens_that_arrive_two_to_a_read_are_timed_by_the_steps_between_reads() -> None:
    # across a 20 ms path llama-server's 1 ms tokens arrive two to a read: most gaps are 0, so the median gap is 0 on
    # both sides and a per-step cost disappears; the stream's mean gap still sees it
    greedy = tuple(ok(itl_ms=(*(0.0, 2.0) * 8, 0.0)) for _ in range(3))
    sampled = tuple(ok(itl_ms=(*(0.0, 3.0) * 8, 0.0)) for _ in range(3))
    out = check_decode_host_overhead(SamplingEvidence(18, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    assert out.evidence["greedy_tpot_ms"] == pytest.approx(16 / 17, abs=1e-3)
    assert out.evidence["added_ms_per_token"] == pytest.approx(8 / 17, abs=1e-3)


def test_a_stream_held_back_and_released_at_once_is_not_priced_by_its_fast_tail() -> None:
    # measured on llama-cpp-python: greedy streams decode a few tokens, hold ~8 ms, then release ten tokens 0.2 ms
    # apart; their median gap (0.2 ms) made sampled streams (a steady 1.2 ms) look 6x slower per token, where they
    # take 0.27 ms more per token over the stream
    greedy = tuple(ok(itl_ms=(1.0, 1.0, 1.0, 1.0, 8.0, *(0.2,) * 10)) for _ in range(3))
    sampled = tuple(ok(itl_ms=(1.2,) * 15) for _ in range(3))
    out = check_decode_host_overhead(SamplingEvidence(16, greedy=greedy, sampled=sampled, parameters=PARAMS), REF)
    assert isinstance(out, Finding), out
    assert out.evidence["greedy_tpot_ms"] == pytest.approx(14 / 15, abs=1e-3)
    assert out.cost_ms == pytest.approx((1.2 - 14 / 15) * 15, abs=0.01)


def test_a_server_that_refuses_sampling_parameters_leaves_it_not_tested() -> None:
    ev = SamplingEvidence(32, greedy=_tpot_streams(6.0), refused="HTTP 400: Unrecognized request argument: top_p")
    out = check_decode_host_overhead(ev, REF)
    assert isinstance(out, NotTested) and "Unrecognized" in out.reason


def test_one_stall_the_server_counts_two_preemptions_for_is_shared_between_them() -> None:
    # one victim waited 1.2 s for blocks; the other was readmitted at once and never stalled visibly
    burst = [_stream([*STEADY[:30], 1206.0, *STEADY[:29]]), *(_stream(STEADY) for _ in range(7))]
    out = check_kv_cache_pressure(_kv(burst, preemptions=2.0, kv_usage_max=1.0), REF)
    assert isinstance(out, Finding) and out.cost_ms == pytest.approx(600.0)


def test_a_preemption_held_just_under_the_stall_threshold_is_still_priced() -> None:
    # the 8 × 20 ms threshold is 160 ms: one victim held 526 ms, the other 150 — a stall by the server's count (and
    # past one stream's recompute), not by the burst's threshold; both are what preemption cost, so the price does
    # not jump when a hold crosses the threshold
    burst = [
        _stream([*STEADY[:30], 526.0, *STEADY[:29]]),
        _stream([*STEADY[:20], 150.0, *STEADY[:39]]),
        *(_stream([*STEADY[:10], 40.0, *STEADY[:49]]) for _ in range(6)),  # a neighbour's prefill held these
    ]
    out = check_kv_cache_pressure(_kv(burst, preemptions=2.0, kv_usage_max=1.0), REF)
    assert isinstance(out, Finding) and out.evidence["stalled_streams"] == 2
    assert out.cost_ms == pytest.approx(((526 - 6) + (150 - 6)) / 2)
    assert out.evidence["priced_holds_ms"] == [520.0, 144.0]


def test_victims_readmitted_before_the_burst_prefill_ends_are_found_where_the_server_counted_them() -> None:
    # vLLM (CPU build, --num-gpu-blocks-override 36): the streams of one burst end together, so a victim is readmitted
    # as soon as a neighbour finishes; its hold (its own recompute and a few steps) stays under the whole burst's
    # prefill (8 × 72 ms), while vLLM's counter says 2 preemptions happened
    burst = [
        _stream([*STEADY[:30], 430.0, *STEADY[:29]], ttft=72.0),
        _stream([*STEADY[:40], 540.0, *STEADY[:19]], ttft=72.0),
        *(_stream([*STEADY[:10], 25.0, *STEADY[:49]], ttft=72.0) for _ in range(6)),
    ]
    ev = KvEvidence(768, 128, 8, alone=(_stream(STEADY, ttft=72.0),), burst=tuple(burst), preemptions=2.0)
    out = check_kv_cache_pressure(ev, REF)
    assert isinstance(out, Finding), out
    assert out.evidence["stall_threshold_ms"] == pytest.approx(576.0)
    assert out.evidence["victim_threshold_ms"] == pytest.approx(72.0) and out.evidence["stalled_streams"] == 2
    assert out.cost_ms == pytest.approx(((430 - 6) + (540 - 6)) / 2)
    # without the server's count the same holds are not told from admitting the others
    uncounted = check_kv_cache_pressure(KvEvidence(768, 128, 8, alone=ev.alone, burst=ev.burst), REF)
    assert not isinstance(uncounted, Finding)


def test_where_preemptions_are_counted_a_stall_must_outlast_the_longest_gap_a_stream_alone_showed() -> None:
    # a busy host held the control 339 ms once: the burst's holds under that are the host's, those over it the cache's
    alone = (_stream([*STEADY[:20], 339.0, *STEADY[:39]], ttft=72.0),)
    victims = [_stream([*STEADY[:30], 600.0, *STEADY[:29]], ttft=72.0), _stream([*STEADY[:40], 300.0, *STEADY[:19]])]
    burst = (*victims, *(_stream(STEADY, ttft=72.0) for _ in range(6)))
    out = check_kv_cache_pressure(KvEvidence(768, 128, 8, alone=alone, burst=burst, preemptions=1.0), REF)
    assert isinstance(out, Finding) and out.evidence["stalled_streams"] == 1, out
    assert out.evidence["victim_threshold_ms"] >= 339.0
    quiet = (_stream([*STEADY[:30], 300.0, *STEADY[:29]], ttft=72.0), *burst[2:], burst[1])
    held = check_kv_cache_pressure(KvEvidence(768, 128, 8, alone=alone, burst=quiet, preemptions=1.0), REF)
    assert isinstance(held, Clear), held  # every hold within what the host did to a stream alone


def _timed(gaps: list[float], start: float = 0.0) -> RequestSample:
    """A stream of ``gaps`` whose tokens arrived from ``start`` (ms, the run's clock) on."""
    at = [start]
    for gap in gaps:
        at.append(at[-1] + gap)
    return ok(ttft_after_setup_ms=20.0, itl_ms=tuple(gaps), token_at_ms=tuple(at))


def test_stalls_every_stream_shared_are_not_a_preemption_without_metrics() -> None:
    # a gateway's event loop busy for 300 ms: every stream in flight stops in the same window, then all go on, the
    # tokens held back meanwhile flushed at once
    burst = [_timed([*STEADY[:20], 300.0, *[0.05] * 10, *STEADY[:39]], start=k * 0.5) for k in range(8)]
    out = check_kv_cache_pressure(_kv(burst), REF)
    assert isinstance(out, Inconclusive) and "every stream stopped at once" in out.reason
    assert out.evidence["stalled_streams"] == 8 and out.evidence["stalled_alone"] == 0


def test_streams_that_stall_while_the_others_decode_are_a_preemption_without_metrics() -> None:
    # two victims stop in turn while the six others keep their 6 ms cadence through both stalls
    victims = [_timed([*STEADY[:20], 300.0, *STEADY[:39]]), _timed([*STEADY[:40], 250.0, *STEADY[:19]])]
    others = [_timed([6.0] * 120, start=k * 0.5) for k in range(6)]
    out = check_kv_cache_pressure(_kv([*victims, *others]), REF)
    assert isinstance(out, Finding) and out.confidence.value == "medium"
    assert out.evidence["stalled_alone"] == 2
    assert out.cost_ms == pytest.approx(((300 - 6) + (250 - 6)) / 2)
