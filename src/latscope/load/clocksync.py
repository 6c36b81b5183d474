"""Clock offsets between the driver and a remote worker, from repeated request/response exchanges.

Each exchange reads the driver's monotonic clock (``t0``), asks the worker for its own monotonic clock
(``remote_ns``), and reads the driver's clock again (``t1``). The worker's reading was taken somewhere in
``[t0, t1]``; assuming the middle, ``offset = remote_ns - (t0 + t1) / 2`` and the error is at most ``(t1 - t0) / 2``.
Queueing and scheduling only ever lengthen an exchange, so the exchange with the smallest round trip is the one
whose midpoint guess is best (the minimum-RTT filter of NTP's clock filter, RFC 5905 §10); its half round trip bounds
the error.

A worker's times convert to the driver's as ``driver_ns = worker_ns - offset_ns``. Per-request durations are
differences of one worker's own clock and never use an offset; only lining up several workers' timelines does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Exchanges per worker: enough that one of them sees no queueing on a quiet network (a few ms in all).
DEFAULT_EXCHANGES = 20


@dataclass(frozen=True, slots=True)
class Exchange:
    """One clock exchange: the driver's clock before and after, the worker's clock in between (monotonic ns)."""

    t0_ns: int
    remote_ns: int
    t1_ns: int

    @property
    def rtt_ns(self) -> int:
        """Round trip of the exchange, ns."""
        return self.t1_ns - self.t0_ns

    @property
    def offset_ns(self) -> int:
        """``remote - midpoint``: what to subtract from a worker time to get the driver's, ns."""
        return self.remote_ns - (self.t0_ns + self.t1_ns) // 2


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """The estimate for one worker: ``offset_ns`` (worker − driver), ``uncertainty_ns`` (± bound: half the minimum
    round trip), the minimum and median round trips, and how many exchanges it came from."""

    offset_ns: int
    uncertainty_ns: int
    rtt_min_ns: int
    rtt_median_ns: int
    exchanges: int

    def to_driver_ns(self, worker_ns: int) -> int:
        """A worker's monotonic time on the driver's clock."""
        return worker_ns - self.offset_ns

    def to_worker_ns(self, driver_ns: int) -> int:
        """A driver's monotonic time on the worker's clock."""
        return driver_ns + self.offset_ns

    def to_dict(self) -> dict[str, float | int]:
        """JSON-ready, in milliseconds."""
        return {
            "offset_ms": self.offset_ns / 1e6,
            "uncertainty_ms": self.uncertainty_ns / 1e6,
            "rtt_min_ms": self.rtt_min_ns / 1e6,
            "rtt_median_ms": self.rtt_median_ns / 1e6,
            "exchanges": self.exchanges,
        }


def estimate_offset(exchanges: Sequence[Exchange]) -> ClockOffset:
    """The minimum-RTT estimate over ``exchanges`` (at least one)."""
    if not exchanges:
        raise ValueError("at least one clock exchange is needed")
    best = min(exchanges, key=lambda e: e.rtt_ns)
    rtts = sorted(e.rtt_ns for e in exchanges)
    return ClockOffset(
        offset_ns=best.offset_ns,
        uncertainty_ns=(best.rtt_ns + 1) // 2,
        rtt_min_ns=best.rtt_ns,
        rtt_median_ns=rtts[len(rtts) // 2],
        exchanges=len(exchanges),
    )


def measure_offset(
    read_remote_ns: Callable[[], int], clock: Callable[[], int], exchanges: int = DEFAULT_EXCHANGES
) -> ClockOffset:
    """Run ``exchanges`` exchanges with ``read_remote_ns`` (a blocking call returning the worker's clock) timed by
    ``clock`` (the driver's monotonic ns), and estimate."""
    samples = []
    for _ in range(exchanges):
        t0 = clock()
        remote = read_remote_ns()
        t1 = clock()
        samples.append(Exchange(t0, remote, t1))
    return estimate_offset(samples)
