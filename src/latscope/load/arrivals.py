"""Arrival processes: when each request of a step is meant to start.

* :class:`ClosedLoop` — a fixed number of users, each sending its next request as soon as the previous one ends.
  Throughput is whatever the server allows; there is no schedule to fall behind.
* :class:`OpenLoop` — requests arrive at ``rate`` per second whatever the server does, with inter-arrival times that
  are exponential (``poisson``), constant, or gamma-distributed (``gamma``; ``burstiness`` is the shape k: k < 1 is
  burstier than Poisson, k = 1 is Poisson, k > 1 smoother; the mean gap stays 1/rate). An optional
  ``max_concurrency`` caps requests in flight; arrivals beyond it wait in the client and that wait is measured as
  client queue time, never dropped from the results.

:class:`Schedule` gives the absolute offsets (ns from the step's start) of the arrivals, computed block by block from
the seed so that every worker process sees the same global schedule and takes its share of it. Offsets are absolute:
a late wake-up never shifts later deadlines (no accumulated sleep error).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from latscope.units import NS_PER_S

#: Arrivals computed per RNG block (one RNG stream per block keyed by (seed, block)).
SCHEDULE_BLOCK = 2048

_RNG_STREAM_ARRIVALS = 2  # distinct from the workload stream (latscope.load.workload)


class ArrivalSpecError(ValueError):
    """An arrival specification could not be read."""


class InterArrival(StrEnum):
    """Distribution of open-loop inter-arrival times."""

    POISSON = "poisson"  #: exponential gaps: a Poisson process, the usual model of independent users
    CONSTANT = "constant"  #: equal gaps of exactly 1/rate
    GAMMA = "gamma"  #: gamma gaps with shape ``burstiness``: bursty (k < 1) or smooth (k > 1) traffic


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """``concurrency`` users, each with one request in flight at a time."""

    concurrency: int

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ArrivalSpecError(f"concurrency must be >= 1, got {self.concurrency}")

    @property
    def label(self) -> str:
        """Short text for tables: ``concurrency=8``."""
        return f"concurrency={self.concurrency}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"kind": "closed", "concurrency": self.concurrency}


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Arrivals at ``rate_rps`` requests per second (mean), whatever the server does."""

    rate_rps: float
    process: InterArrival = InterArrival.POISSON
    burstiness: float = 1.0  #: gamma shape k (only for ``gamma``); coefficient of variation of the gaps = 1/√k
    max_concurrency: int | None = None  #: cap on requests in flight; excess arrivals queue in the client (measured)

    def __post_init__(self) -> None:
        if not self.rate_rps > 0 or math.isinf(self.rate_rps):
            raise ArrivalSpecError(f"rate must be a positive number of requests/s, got {self.rate_rps}")
        if not self.burstiness > 0:
            raise ArrivalSpecError(f"burstiness must be > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ArrivalSpecError(f"max concurrency must be >= 1, got {self.max_concurrency}")

    @property
    def label(self) -> str:
        """Short text for tables: ``rate=100/s poisson``."""
        text = f"rate={self.rate_rps:g}/s {self.process}"
        if self.process is InterArrival.GAMMA:
            text += f"(k={self.burstiness:g})"
        if self.max_concurrency is not None:
            text += f" max={self.max_concurrency}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "kind": "open",
            "rate_rps": self.rate_rps,
            "process": str(self.process),
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
        }

    def inter_arrivals_s(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
        """``n`` inter-arrival gaps in seconds, mean 1/rate."""
        mean = 1.0 / self.rate_rps
        if self.process is InterArrival.CONSTANT:
            return np.full(n, mean)
        if self.process is InterArrival.POISSON:
            return rng.exponential(mean, size=n)
        return rng.gamma(self.burstiness, mean / self.burstiness, size=n)


Arrival = ClosedLoop | OpenLoop


def arrival_from_dict(data: dict[str, Any]) -> Arrival:
    """Inverse of ``to_dict`` of either arrival kind."""
    if data.get("kind") == "closed":
        return ClosedLoop(int(data["concurrency"]))
    if data.get("kind") == "open":
        cap = data.get("max_concurrency")
        return OpenLoop(
            float(data["rate_rps"]),
            InterArrival(data.get("process", "poisson")),
            float(data.get("burstiness", 1.0)),
            None if cap is None else int(cap),
        )
    raise ArrivalSpecError(f"unknown arrival kind {data.get('kind')!r}")


class Schedule:
    """Absolute arrival offsets of an open loop, in ns from the step's start, reproducible from ``seed``.

    The first arrival is at offset 0 (the common start); arrival ``i`` is at the sum of the first ``i`` gaps.
    """

    def __init__(self, arrival: OpenLoop, seed: int = 0) -> None:
        self.arrival = arrival
        self.seed = seed

    def offsets_ns(self) -> Iterator[int]:
        """Every arrival's offset, in order, without end."""
        elapsed_s = 0.0
        block = 0
        while True:
            rng = np.random.default_rng([self.seed, _RNG_STREAM_ARRIVALS, block])
            gaps = self.arrival.inter_arrivals_s(rng, SCHEDULE_BLOCK)
            # Cumulative sums in float64 seconds stay exact to well under a ns for runs of days.
            starts = elapsed_s + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
            for value in np.rint(starts * NS_PER_S).astype(np.int64).tolist():
                yield int(value)
            elapsed_s = float(starts[-1] + gaps[-1])
            block += 1

    def share(self, worker: int, workers: int) -> Iterator[tuple[int, int]]:
        """``(index, offset_ns)`` of the arrivals worker ``worker`` of ``workers`` sends (indices ≡ worker mod workers).

        Round-robin shares of one global schedule: their union is exactly the global process, so N workers together
        offer the same arrivals one worker would.
        """
        for index, offset in enumerate(self.offsets_ns()):
            if index % workers == worker:
                yield index, offset


_SWEEP_SEP = re.compile(r"[,\s]+")


def parse_numbers(text: str) -> list[float]:
    """``"1,8,64"`` → ``[1.0, 8.0, 64.0]`` (a sweep); raises :class:`ArrivalSpecError` on anything else."""
    try:
        values = [float(v) for v in _SWEEP_SEP.split(text.strip()) if v]
    except ValueError:
        raise ArrivalSpecError(f"expected numbers separated by commas, got {text!r}") from None
    if not values:
        raise ArrivalSpecError("expected at least one number")
    return values
