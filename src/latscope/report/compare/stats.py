"""The statistics of a before/after comparison: bootstrap confidence intervals of differences, and the split of a
difference over the timeline's phases. Pure functions of numpy arrays: no I/O.

**Percentile differences.** A percentile is numpy's default (linear interpolation between order statistics, the
convention of :mod:`latscope.load.stats`), and its bootstrap distribution is drawn *exactly* without resampling
whole samples: a bootstrap sample is ``F⁻¹(U₁) … F⁻¹(Uₙ)`` for ``n`` uniforms and the empirical quantile function
``F⁻¹``, which is monotone, so its ``m``-th order statistic is ``F⁻¹(U₍ₘ₎)`` with ``U₍ₘ₎ ~ Beta(m, n − m + 1)``, and
the next one ``U₍ₘ₊₁₎ = U₍ₘ₎ + (1 − U₍ₘ₎)·Beta(1, n − m)``. So a resample costs O(1) whatever ``n`` is: a million
inter-token gaps take as long as a hundred. The interval of ``B − A`` is the percentile interval of the difference of
independent draws for the two runs; a difference is *significant* when that interval excludes 0.

Every sample is treated as independent draws. Requests of one run share a server and inter-token gaps of one stream
share a request, so a correlated tail makes the interval somewhat narrow; the tests check the false-alarm rate on
independent samples.

**Proportions** (error rate, goodput share) are bootstrapped as binomial draws of each run's count.

**Phase attribution.** Each request's total (TTFT or E2E, ms) is the sum of its phases (pool wait, connect, TLS,
send, server-reported phases …, with a remainder so the sum is exact). For a percentile ``q`` the requests whose
total ranks within ``q ± band`` in each run are taken, and the difference of their mean phase durations is the
phase's share of the change. The shares add up exactly to the change of those requests' mean total, which is close
to the change of the percentile itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Bootstrap draws per difference: the 2.5 % and 97.5 % points of 4000 draws move by well under 1 % of the
#: interval's width from one seed to another.
DEFAULT_RESAMPLES = 4000
#: The confidence of the interval (95 %: a difference of two same-distribution samples is called significant about
#: 5 % of the time).
DEFAULT_CONFIDENCE = 0.95
#: Half-width of the rank band around a percentile whose requests are split into phases (0.05: p95 looks at the
#: requests between p90 and p100).
ATTRIBUTION_BAND = 0.05
#: The fewest requests a band holds (it widens by rank until it does): a mean of fewer is one request's story.
MIN_BAND_REQUESTS = 5
#: The name of the part of a total its phases do not cover (gaps between marks, unreported time).
REMAINDER = "other"


@dataclass(frozen=True, slots=True)
class Difference:
    """One statistic in two runs, and the bootstrap interval of its change ``b − a`` (in the statistic's unit: ms for
    latency percentiles, a fraction 0…1 for rates)."""

    a: float  #: the statistic in run A (before)
    b: float  #: the statistic in run B (after)
    delta: float  #: ``b − a``
    low: float  #: lower end of the confidence interval of ``delta``
    high: float  #: upper end of the confidence interval of ``delta``
    confidence: float  #: the interval's confidence, e.g. 0.95
    n_a: int  #: samples in A
    n_b: int  #: samples in B
    #: the smallest change called significant, in the statistic's unit (0: any change whose interval excludes 0)
    min_change: float = 0.0

    @property
    def significant(self) -> bool:
        """True when the interval excludes 0 (the change is unlikely to be sampling noise at this confidence) and
        the change is at least :attr:`min_change`."""
        return (self.low > 0.0 or self.high < 0.0) and abs(self.delta) >= self.min_change

    @property
    def relative(self) -> float | None:
        """``delta / a`` (None when ``a`` is 0)."""
        return None if self.a == 0 else self.delta / self.a

    def to_dict(self) -> dict[str, float | int | bool | None]:
        """JSON-ready form."""
        return {
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "significant": self.significant,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "min_change": self.min_change,
        }


def _clean(values: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    return np.sort(arr[~np.isnan(arr)])


def bootstrap_percentile(
    ordered: FloatArray, q: float, rng: np.random.Generator, resamples: int = DEFAULT_RESAMPLES
) -> FloatArray:
    """``resamples`` bootstrap replicates of the ``q``-quantile (0…1, linear interpolation) of the sorted sample
    ``ordered``, drawn exactly through the order statistics' Beta laws (see the module docstring)."""
    n = ordered.size
    if n == 0:
        raise ValueError("an empty sample has no percentile")
    if n == 1:
        return np.full(resamples, ordered[0])
    position = q * (n - 1)
    lower = int(np.floor(position))  # 0-based index of the lower order statistic
    frac = position - lower
    m = lower + 1  # its 1-based rank
    u_low = rng.beta(m, n - m + 1, size=resamples)
    # the next order statistic: the smallest of the n − m uniforms above U₍ₘ₎
    u_high = u_low + (1.0 - u_low) * rng.beta(1, n - m, size=resamples) if m < n else u_low

    def inverse_cdf(u: FloatArray) -> FloatArray:
        index = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
        return ordered[index]

    replicates: FloatArray = (1.0 - frac) * inverse_cdf(u_low) + frac * inverse_cdf(u_high)
    return replicates


def percentile_difference(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    q: float,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    min_change_share: float = 0.0,
) -> Difference | None:
    """The change of the ``q``-quantile (0…1) from sample ``a`` to sample ``b`` (NaN ignored), with its bootstrap
    interval; None when either sample is empty. ``seed`` makes the interval reproducible; a change smaller than
    ``min_change_share`` of A's value is not called significant."""
    xa, xb = _clean(a), _clean(b)
    if xa.size == 0 or xb.size == 0:
        return None
    rng = np.random.default_rng(seed)
    draws = bootstrap_percentile(xb, q, rng, resamples) - bootstrap_percentile(xa, q, rng, resamples)
    pa, pb = float(np.quantile(xa, q)), float(np.quantile(xb, q))
    low, high = np.quantile(draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Difference(
        pa, pb, pb - pa, float(low), float(high), confidence, int(xa.size), int(xb.size), min_change_share * abs(pa)
    )


def proportion_difference(
    hits_a: int,
    n_a: int,
    hits_b: int,
    n_b: int,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Difference | None:
    """The change of a rate (``hits / n``, 0…1) from A to B with a binomial bootstrap interval; None when either run
    has no trials."""
    if n_a <= 0 or n_b <= 0:
        return None
    rng = np.random.default_rng(seed)
    pa, pb = hits_a / n_a, hits_b / n_b
    draws = rng.binomial(n_b, pb, size=resamples) / n_b - rng.binomial(n_a, pa, size=resamples) / n_a
    low, high = np.quantile(draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Difference(pa, pb, pb - pa, float(low), float(high), confidence, n_a, n_b)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Where a percentile's change lives: the requests around the percentile in each run, split into phases.

    ``phases`` maps a phase name to its change in ms (B's band mean − A's), in the order given, with
    :data:`REMAINDER` last when the phases do not cover the totals; the values add up to ``total_ms``, the change of
    the band's mean total."""

    q: float  #: the percentile, 0…1
    total_ms: float  #: change of the mean total of the requests in the band (ms)
    phases: tuple[tuple[str, float], ...]  #: (phase, change in ms)
    n_a: int  #: requests in A's band
    n_b: int  #: requests in B's band

    def largest(self) -> tuple[str, float] | None:
        """The phase whose change has the same sign as the total and the largest size (None when none has)."""
        same = [(name, ms) for name, ms in self.phases if ms * self.total_ms > 0]
        return max(same, key=lambda item: abs(item[1])) if same else None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"q": self.q, "total_ms": self.total_ms, "phases": dict(self.phases), "n_a": self.n_a, "n_b": self.n_b}


def band(totals: FloatArray, q: float, width: float = ATTRIBUTION_BAND) -> npt.NDArray[np.intp]:
    """Indices of the requests whose total ranks within ``q ± width`` (at least :data:`MIN_BAND_REQUESTS` of them,
    the ones nearest the percentile's rank, when the sample has that many)."""
    n = totals.size
    order = np.argsort(totals, kind="stable")
    centre = q * (n - 1)
    low = max(0, int(np.floor((q - width) * (n - 1))))
    high = min(n - 1, int(np.ceil((q + width) * (n - 1))))
    while high - low + 1 < min(MIN_BAND_REQUESTS, n):
        if low > 0 and (high >= n - 1 or centre - low <= high - centre):
            low -= 1
        else:
            high += 1
    picked: npt.NDArray[np.intp] = order[low : high + 1]
    return picked


def attribute(
    totals_a: npt.ArrayLike,
    phases_a: Mapping[str, npt.ArrayLike],
    totals_b: npt.ArrayLike,
    phases_b: Mapping[str, npt.ArrayLike],
    q: float,
    *,
    order: Sequence[str] | None = None,
    width: float = ATTRIBUTION_BAND,
) -> Attribution | None:
    """Split the change of the ``q``-percentile of a per-request total into phases (see the module docstring).

    ``totals_*`` are per-request totals (ms); ``phases_*`` map phase names to per-request durations aligned with
    them (NaN = the phase did not happen = 0 ms). A request whose total is NaN is left out. The phases' changes plus
    the remainder add up to the change of the band's mean total. None when a run has no request with a total."""
    names = list(order) if order is not None else list(dict.fromkeys([*phases_a, *phases_b]))

    def band_means(totals: npt.ArrayLike, phases: Mapping[str, npt.ArrayLike]) -> tuple[float, list[float], int]:
        t = np.asarray(totals, dtype=np.float64)
        keep = ~np.isnan(t)
        t = t[keep]
        if t.size == 0:
            return float("nan"), [], 0
        picked = band(t, q, width)
        means: list[float] = []
        for name in names:
            values = np.asarray(phases[name], dtype=np.float64)[keep] if name in phases else np.zeros(t.size)
            means.append(float(np.nan_to_num(values[picked]).mean()))
        return float(t[picked].mean()), means, int(picked.size)

    total_a, means_a, n_a = band_means(totals_a, phases_a)
    total_b, means_b, n_b = band_means(totals_b, phases_b)
    if n_a == 0 or n_b == 0:
        return None
    total = total_b - total_a
    changes = [(name, mb - ma) for name, ma, mb in zip(names, means_a, means_b, strict=True)]
    rest = total - sum(ms for _, ms in changes)
    if REMAINDER in names:  # the caller's own remainder takes what float rounding leaves
        changes = [(name, ms + rest if name == REMAINDER else ms) for name, ms in changes]
    elif abs(rest) > 1e-9 * max(1.0, abs(total)):
        changes.append((REMAINDER, rest))
    return Attribution(q, total, tuple(changes), n_a, n_b)
