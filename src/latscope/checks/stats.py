"""Small, exact statistics for checks: medians, percentiles, spread, a sign test, and a least-squares line with its
uncertainty.

Pure Python on short lists (a check sees tens of samples, not millions), so results are deterministic and the
functions are trivially testable. Every function takes plain floats and says what it returns for too little data
(``None``, never a made-up zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from latscope.timeline.percentile import percentile as percentile

#: Scales a median absolute deviation to the standard deviation of a normal distribution (1 / Φ⁻¹(3/4)).
MAD_TO_SD = 1.4826


def median(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def robust_sd(values: Sequence[float]) -> float | None:
    """A spread estimate that one outlier cannot inflate: 1.4826 × the median absolute deviation. None below 2
    values."""
    if len(values) < 2:
        return None
    mid = median(values)
    assert mid is not None
    deviations = [abs(v - mid) for v in values]
    mad = median(deviations)
    assert mad is not None
    return MAD_TO_SD * mad


def sign_test_p(positives: int, n: int) -> float:
    """One-sided sign test: the probability that ``positives`` or more of ``n`` paired differences are positive when
    each is positive or negative with probability ½ (no effect, only noise that favours neither side). 1.0 for no
    pairs."""
    if not 0 <= positives <= n:
        raise ValueError(f"positives must be within 0..n ({n}), got {positives}")
    return float(sum(math.comb(n, k) for k in range(positives, n + 1)) / 2**n)


@dataclass(frozen=True, slots=True)
class LineFit:
    """``y ≈ intercept + slope · x`` by ordinary least squares.

    ``slope_se`` is the standard error of the slope (None with fewer than 3 points: no residual degrees of freedom);
    ``r2`` the coefficient of determination (1.0 when y has no variance at all); ``residual_sd`` the standard
    deviation of the residuals, in y's unit.
    """

    slope: float
    intercept: float
    r2: float
    residual_sd: float
    slope_se: float | None
    n: int

    def at(self, x: float) -> float:
        """The fitted y at ``x``."""
        return self.intercept + self.slope * x


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LineFit | None:
    """Least-squares line through ``(xs, ys)``; None with fewer than 2 points or when every x is the same."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys must have the same length")
    n = len(xs)
    if n < 2:
        return None
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0.0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0.0 else 1.0
    dof = n - 2
    residual_sd = math.sqrt(ss_res / dof) if dof > 0 else 0.0
    slope_se = math.sqrt(ss_res / dof / sxx) if dof > 0 else None
    return LineFit(slope=slope, intercept=intercept, r2=r2, residual_sd=residual_sd, slope_se=slope_se, n=n)


@dataclass(frozen=True, slots=True)
class QuadraticFit:
    """``y ≈ a + b·x + c·x²`` by ordinary least squares, with the standard error of each coefficient (None with
    fewer than 4 points: no residual degrees of freedom) and the residuals' standard deviation (y's unit)."""

    a: float
    b: float
    c: float
    a_se: float | None
    b_se: float | None
    c_se: float | None
    residual_sd: float
    n: int

    def at(self, x: float) -> float:
        """The fitted y at ``x``."""
        return self.a + self.b * x + self.c * x * x

    def quadratic_at(self, x: float) -> float:
        """The quadratic term alone at ``x``: what ``y`` has above its constant-plus-linear part there."""
        return self.c * x * x


def _inverse3(m: list[list[float]]) -> list[list[float]] | None:
    """The inverse of a 3×3 matrix by cofactors, None when it is singular (relative to its scale)."""
    (a, b, c), (d, e, f), (g, h, i) = m
    cof = [
        [e * i - f * h, -(d * i - f * g), d * h - e * g],
        [-(b * i - c * h), a * i - c * g, -(a * h - b * g)],
        [b * f - c * e, -(a * f - c * d), a * e - b * d],
    ]
    det = a * cof[0][0] + b * cof[0][1] + c * cof[0][2]
    scale = max(abs(v) for row in m for v in row) ** 3
    if scale == 0.0 or abs(det) <= 1e-12 * scale:
        return None
    return [[cof[col][row] / det for col in range(3)] for row in range(3)]


def fit_quadratic(xs: Sequence[float], ys: Sequence[float]) -> QuadraticFit | None:
    """Least-squares ``a + b·x + c·x²`` through ``(xs, ys)``; None with fewer than 3 distinct x values.

    x is scaled to its largest magnitude before solving so prompt lengths of tens of thousands stay well
    conditioned; the coefficients and their standard errors are given in the caller's units."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys must have the same length")
    n = len(xs)
    if n < 3 or len(set(xs)) < 3:
        return None
    scale = max(abs(x) for x in xs)
    us = [x / scale for x in xs]
    rows = [(1.0, u, u * u) for u in us]
    xtx = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    inverse = _inverse3(xtx)
    if inverse is None:
        return None
    xty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(3)]
    coef = [sum(inverse[i][j] * xty[j] for j in range(3)) for i in range(3)]
    ss_res = sum((y - (coef[0] + coef[1] * u + coef[2] * u * u)) ** 2 for u, y in zip(us, ys, strict=True))
    dof = n - 3
    residual_sd = math.sqrt(ss_res / dof) if dof > 0 else 0.0
    ses = [math.sqrt(max(0.0, inverse[i][i]) * ss_res / dof) if dof > 0 else None for i in range(3)]
    units = (1.0, scale, scale * scale)
    a, b, c = (coef[i] / units[i] for i in range(3))
    a_se, b_se, c_se = (None if se is None else se / unit for se, unit in zip(ses, units, strict=True))
    return QuadraticFit(a=a, b=b, c=c, a_se=a_se, b_se=b_se, c_se=c_se, residual_sd=residual_sd, n=n)
