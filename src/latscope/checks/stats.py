"""Small, exact statistics for checks: medians, percentiles, spread, and a least-squares line with its uncertainty.

Pure Python on short lists (a check sees tens of samples, not millions), so results are deterministic and the
functions are trivially testable. Every function takes plain floats and says what it returns for too little data
(``None``, never a made-up zero).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) with linear interpolation between order statistics, or None for no values."""
    if not values:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


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
