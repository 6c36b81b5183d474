"""Arrival processes: the distributions of the gaps and the schedule that workers share."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from latscope.load.arrivals import (
    SCHEDULE_BLOCK,
    ArrivalSpecError,
    ClosedLoop,
    InterArrival,
    OpenLoop,
    Schedule,
    arrival_from_dict,
    parse_numbers,
)

#: Kolmogorov–Smirnov critical value coefficient for α = 0.01 (large-sample): reject when D > 1.628 / √n.
KS_ALPHA_001 = 1.628


def ks_exponential(gaps_s: npt.NDArray[np.float64], rate: float) -> float:
    """The KS statistic of ``gaps_s`` against the exponential distribution with ``rate``."""
    x = np.sort(gaps_s)
    n = x.size
    cdf = 1.0 - np.exp(-rate * x)
    above = np.arange(1, n + 1) / n - cdf
    below = cdf - np.arange(0, n) / n
    return float(max(above.max(), below.max()))


def schedule_gaps_s(arrival: OpenLoop, n: int, seed: int = 7) -> npt.NDArray[np.float64]:
    offsets = np.fromiter(itertools.islice(Schedule(arrival, seed).offsets_ns(), n + 1), dtype=np.int64)
    return np.diff(offsets) / 1e9


def test_poisson_inter_arrivals_pass_a_goodness_of_fit_test() -> None:
    rate = 250.0
    n = 3 * SCHEDULE_BLOCK  # spans block boundaries: the joins must not distort the process
    gaps = schedule_gaps_s(OpenLoop(rate), n)
    assert ks_exponential(gaps, rate) < KS_ALPHA_001 / np.sqrt(n)


def test_the_goodness_of_fit_test_rejects_non_poisson_gaps() -> None:
    # The same check must fail for gaps that are not exponential, or passing it would mean nothing.
    rate = 250.0
    n = 5000
    for arrival in (OpenLoop(rate, InterArrival.CONSTANT), OpenLoop(rate, InterArrival.GAMMA, burstiness=0.3)):
        assert ks_exponential(schedule_gaps_s(arrival, n), rate) > KS_ALPHA_001 / np.sqrt(n)


def test_poisson_counts_per_window_have_poisson_dispersion() -> None:
    rate = 100.0
    offsets = np.fromiter(itertools.islice(Schedule(OpenLoop(rate), 3).offsets_ns(), 50_000), dtype=np.int64)
    counts = np.bincount((offsets // 100_000_000).astype(np.int64))[:-1]  # arrivals per 100 ms window
    assert abs(counts.var() / counts.mean() - 1.0) < 0.1  # variance = mean for a Poisson process


def test_constant_gaps_are_exact() -> None:
    gaps = schedule_gaps_s(OpenLoop(1000.0, InterArrival.CONSTANT), 10_000)
    assert np.allclose(gaps, 0.001, atol=1e-9)


@pytest.mark.parametrize("k", [0.25, 1.0, 4.0])
def test_gamma_burstiness_sets_the_coefficient_of_variation(k: float) -> None:
    gaps = schedule_gaps_s(OpenLoop(50.0, InterArrival.GAMMA, burstiness=k), 40_000)
    assert abs(gaps.mean() / 0.02 - 1) < 0.03
    assert abs(gaps.std() / gaps.mean() - 1 / np.sqrt(k)) < 0.05


def test_the_mean_rate_is_the_target_rate() -> None:
    for process in InterArrival:
        gaps = schedule_gaps_s(OpenLoop(400.0, process, burstiness=2.0), 40_000)
        assert abs(1 / gaps.mean() / 400.0 - 1) < 0.02


def test_schedule_offsets_are_absolute_and_start_at_zero() -> None:
    offsets = list(itertools.islice(Schedule(OpenLoop(10.0, InterArrival.CONSTANT)).offsets_ns(), 3 * SCHEDULE_BLOCK))
    assert offsets[0] == 0
    # exact multiples of 100 ms, across blocks: no drift from summing gaps block by block
    assert offsets[-1] == (3 * SCHEDULE_BLOCK - 1) * 100_000_000


def test_the_same_seed_gives_the_same_schedule_and_another_seed_does_not() -> None:
    a = list(itertools.islice(Schedule(OpenLoop(100.0), 1).offsets_ns(), 100))
    b = list(itertools.islice(Schedule(OpenLoop(100.0), 1).offsets_ns(), 100))
    c = list(itertools.islice(Schedule(OpenLoop(100.0), 2).offsets_ns(), 100))
    assert a == b and a != c


def test_worker_shares_partition_the_global_schedule() -> None:
    schedule = Schedule(OpenLoop(100.0), 5)
    whole = list(itertools.islice(enumerate(schedule.offsets_ns()), 1000))
    shares = [list(itertools.takewhile(lambda x: x[0] < 1000, schedule.share(w, 3))) for w in range(3)]
    merged = sorted(x for share in shares for x in share)
    assert merged == whole


def test_arrival_dicts_round_trip() -> None:
    for arrival in (ClosedLoop(8), OpenLoop(12.5, InterArrival.GAMMA, 0.5, 64)):
        assert arrival_from_dict(arrival.to_dict()) == arrival


def test_labels_name_the_process() -> None:
    assert ClosedLoop(8).label == "concurrency=8"
    assert OpenLoop(5, InterArrival.GAMMA, 0.5).label == "rate=5/s gamma(k=0.5)"


@pytest.mark.parametrize("make", [lambda: ClosedLoop(0), lambda: OpenLoop(0), lambda: OpenLoop(1, burstiness=0)])
def test_invalid_arrivals_raise(make: object) -> None:
    with pytest.raises(ArrivalSpecError):
        make()  # type: ignore[operator]


def test_parse_numbers_reads_sweeps() -> None:
    assert parse_numbers("1,8, 64") == [1.0, 8.0, 64.0]
    with pytest.raises(ArrivalSpecError):
        parse_numbers("1,x")
