"""Clock offsets from request/response exchanges: the minimum round trip wins and bounds the error."""

from __future__ import annotations

import pytest

from latscope.load.clocksync import Exchange, estimate_offset, measure_offset


def test_the_exchange_with_the_shortest_round_trip_gives_the_offset_and_its_half_round_trip_the_uncertainty() -> None:
    # the worker's clock is 5 ms ahead; queueing delays only the slow exchanges' replies, skewing their midpoints
    exchanges = [
        Exchange(t0_ns=0, remote_ns=5_000_000 + 9_000_000, t1_ns=10_000_000),  # reply queued 8 ms
        Exchange(t0_ns=20_000_000, remote_ns=5_000_000 + 20_100_000, t1_ns=20_200_000),  # 200 µs, symmetric
        Exchange(t0_ns=30_000_000, remote_ns=5_000_000 + 30_500_000, t1_ns=33_000_000),
    ]
    clock = estimate_offset(exchanges)
    assert clock.offset_ns == 5_000_000
    assert clock.uncertainty_ns == 100_000 and clock.rtt_min_ns == 200_000
    assert clock.exchanges == 3 and clock.rtt_median_ns == 3_000_000
    assert clock.to_driver_ns(clock.to_worker_ns(123)) == 123


def test_the_true_offset_is_always_within_the_uncertainty() -> None:
    # the reply may be read anywhere in the round trip: the estimate is off by at most half of it
    for at in (0, 50_000, 100_000):
        clock = estimate_offset([Exchange(1_000_000, 7_000_000 + 1_000_000 + at, 1_100_000)])
        assert abs(clock.offset_ns - 7_000_000) <= clock.uncertainty_ns


def test_measuring_reads_the_remote_clock_between_two_local_readings() -> None:
    ticks = iter(range(0, 10_000, 10))
    clock = measure_offset(lambda: 1_000_000 + next(ticks), lambda: next(ticks), exchanges=4)
    assert clock.exchanges == 4 and clock.offset_ns == 1_000_000 and clock.rtt_min_ns == 20


def test_no_exchange_is_an_error() -> None:
    with pytest.raises(ValueError):
        estimate_offset([])
