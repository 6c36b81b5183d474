"""The comparison's statistics: bootstrap intervals of percentile and rate changes, and the phase split."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.report.compare.stats import (
    REMAINDER,
    attribute,
    band,
    bootstrap_percentile,
    percentile_difference,
    proportion_difference,
)


def test_the_interval_covers_a_known_shift_and_calls_it_significant() -> None:
    rng = np.random.default_rng(1)
    a = rng.lognormal(np.log(100), 0.3, 400)
    b = rng.lognormal(np.log(100), 0.3, 400) + 40.0  # every request 40 ms slower
    for q in (0.5, 0.95):
        d = percentile_difference(a, b, q, seed=3)
        assert d is not None
        assert d.low < 40.0 < d.high, d
        assert d.significant and d.delta > 0


def test_same_distribution_pairs_are_called_significant_at_about_the_nominal_rate() -> None:
    # 200 pairs of same-distribution samples: a 95 % interval excludes 0 about 5 % of the time
    for q in (0.5, 0.95):
        alarms = 0
        for repeat in range(200):
            rng = np.random.default_rng(10_000 + repeat)
            a, b = rng.gamma(2.0, 50.0, 300), rng.gamma(2.0, 50.0, 300)
            d = percentile_difference(a, b, q, seed=repeat, resamples=2000)
            assert d is not None
            alarms += d.significant
        assert alarms / 200 <= 0.10, (q, alarms)


def test_the_interval_narrows_as_samples_grow() -> None:
    rng = np.random.default_rng(2)
    widths = []
    for n in (100, 10_000):
        d = percentile_difference(rng.exponential(10, n), rng.exponential(10, n), 0.5)
        assert d is not None
        widths.append(d.high - d.low)
    assert widths[1] < widths[0] / 5


def test_the_exact_bootstrap_of_a_percentile_matches_resampling() -> None:
    rng = np.random.default_rng(4)
    x = np.sort(rng.exponential(20, 150))
    exact = bootstrap_percentile(x, 0.9, np.random.default_rng(5), 20_000)
    resampled = np.quantile(rng.choice(x, size=(20_000, x.size)), 0.9, axis=1)
    for p in (5, 50, 95):
        assert np.percentile(exact, p) == pytest.approx(np.percentile(resampled, p), rel=0.03)


def test_the_result_is_reproducible_with_a_seed() -> None:
    a, b = np.arange(50.0), np.arange(50.0) + 1
    assert percentile_difference(a, b, 0.5, seed=7) == percentile_difference(a, b, 0.5, seed=7)


def test_nan_is_ignored_and_an_empty_sample_gives_none() -> None:
    d = percentile_difference([1.0, np.nan, 3.0], [2.0, 4.0, np.nan], 0.5)
    assert d is not None and d.a == 2.0 and d.b == 3.0 and d.n_a == 2
    assert percentile_difference([], [1.0], 0.5) is None


def test_a_rate_change_is_significant_only_when_it_is_large_for_the_counts() -> None:
    big = proportion_difference(5, 200, 40, 200)
    small = proportion_difference(5, 200, 7, 200)
    assert big is not None and big.significant and big.delta == pytest.approx(0.175)
    assert small is not None and not small.significant


def _requests(rng: np.random.Generator, n: int, queue_ms: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    phases = {
        "connect": rng.uniform(0.1, 0.3, n),
        "send": rng.uniform(0.05, 0.1, n),
        "server queue": rng.exponential(queue_ms, n),
        "server prefill": rng.normal(30, 2, n),
    }
    total = sum(phases.values()) + rng.uniform(0, 1, n)  # unreported time
    return total, phases


def test_attribution_puts_a_queue_change_in_the_queue_and_sums_to_the_total() -> None:
    rng = np.random.default_rng(6)
    ta, pa = _requests(rng, 500, queue_ms=200.0)
    tb, pb = _requests(rng, 500, queue_ms=5.0)
    for q in (0.5, 0.95):
        att = attribute(ta, pa, tb, pb, q)
        assert att is not None
        changes = dict(att.phases)
        assert sum(changes.values()) == pytest.approx(att.total_ms, abs=1e-9)
        assert att.largest() == ("server queue", changes["server queue"])
        assert abs(changes["server prefill"]) < 0.05 * abs(att.total_ms)
        assert REMAINDER in changes  # the unreported part, kept so the split is whole
        d = percentile_difference(ta, tb, q)
        assert d is not None and att.total_ms == pytest.approx(d.delta, rel=0.25)


def test_missing_phases_count_as_zero_and_requests_without_a_total_are_left_out() -> None:
    ta = np.array([10.0, 12.0, np.nan, 11.0, 10.5, 11.5])
    tb = ta + 5
    pa = {"tls": np.array([np.nan] * 6)}
    pb = {"tls": np.where(np.isnan(tb), np.nan, 5.0)}
    att = attribute(ta, pa, tb, pb, 0.5)
    assert att is not None and att.n_a == 5
    assert dict(att.phases)["tls"] == pytest.approx(5.0) and att.total_ms == pytest.approx(5.0)


def test_the_band_holds_the_requests_around_the_percentile() -> None:
    totals = np.arange(100.0)[::-1]  # rank r has value r; index 99 − r
    picked = band(totals, 0.95, 0.05)
    assert sorted(totals[picked]) == list(np.arange(89.0, 100.0))  # ranks 89.1 … 99 widened to whole ranks
    assert band(np.arange(3.0), 0.5).size == 3  # fewer than the minimum: all of them
