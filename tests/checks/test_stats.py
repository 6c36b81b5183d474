"""The statistics helpers: exact on small inputs, None for too little data."""

from __future__ import annotations

import math

import pytest

from latscope.checks.stats import fit_line, median, percentile, robust_sd, sign_test_p


def test_median_of_odd_and_even_counts_and_of_nothing() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None


def test_percentile_interpolates_between_order_statistics() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 0) == 10.0 and percentile(values, 100) == 40.0
    assert percentile(values, 50) == 25.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_robust_sd_ignores_one_outlier() -> None:
    steady = [10.0, 10.2, 9.8, 10.1, 9.9]
    assert robust_sd([*steady, 500.0]) == pytest.approx(robust_sd(steady), rel=0.6)
    assert robust_sd([1.0]) is None


def test_sign_test_is_the_binomial_tail_of_a_fair_coin() -> None:
    assert sign_test_p(5, 5) == pytest.approx(1 / 32)
    assert sign_test_p(15, 20) == pytest.approx(21700 / 2**20)  # C(20,15..20) = 15504+4845+1140+190+20+1
    assert sign_test_p(0, 7) == 1.0 and sign_test_p(0, 0) == 1.0
    # more positives of the same count are less likely under noise alone
    assert sign_test_p(7, 8) < sign_test_p(6, 8) < sign_test_p(5, 8)
    with pytest.raises(ValueError, match="positives"):
        sign_test_p(9, 8)


def test_fit_line_recovers_an_exact_line_with_zero_residuals() -> None:
    fit = fit_line([0.0, 1.0, 2.0, 4.0], [3.0, 5.0, 7.0, 11.0])
    assert fit is not None
    assert fit.slope == pytest.approx(2.0) and fit.intercept == pytest.approx(3.0)
    assert fit.r2 == pytest.approx(1.0) and fit.residual_sd == pytest.approx(0.0) and fit.slope_se == pytest.approx(0)
    assert fit.at(10.0) == pytest.approx(23.0)


def test_fit_line_reports_the_slope_uncertainty_of_noisy_data() -> None:
    xs = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ys = [1.0, 2.9, 5.2, 6.8, 9.1, 11.0]
    fit = fit_line(xs, ys)
    assert fit is not None and fit.slope_se is not None
    assert fit.slope == pytest.approx(2.0, abs=0.1) and 0.0 < fit.slope_se < 0.2 and 0.99 < fit.r2 < 1.0
    assert math.isfinite(fit.residual_sd)


def test_fit_line_needs_two_distinct_x() -> None:
    assert fit_line([1.0], [2.0]) is None
    assert fit_line([1.0, 1.0], [2.0, 3.0]) is None
    two = fit_line([0.0, 1.0], [0.0, 1.0])
    assert two is not None and two.slope_se is None


def test_quadratic_fit_recovers_prompt_scale_coefficients_and_their_uncertainty() -> None:
    from latscope.checks.stats import fit_quadratic

    xs = [16.0, 512.0, 2048.0, 4096.0, 8192.0, 16384.0]
    exact = fit_quadratic(xs, [2.0 + 0.02 * x + 1e-5 * x * x for x in xs])
    assert exact is not None
    assert (exact.a, exact.b, exact.c) == (pytest.approx(2.0), pytest.approx(0.02), pytest.approx(1e-5))
    assert exact.quadratic_at(8192) == pytest.approx(1e-5 * 8192**2)
    noisy = fit_quadratic(xs, [2.0 + 0.02 * x + 1e-5 * x * x + (3.0 if i % 2 else -3.0) for i, x in enumerate(xs)])
    assert noisy is not None and noisy.c_se is not None and 0 < noisy.c_se < noisy.c / 10
    assert fit_quadratic([1.0, 1.0, 2.0], [1.0, 2.0, 3.0]) is None  # two distinct x values: no curve
