"""The gateway's circuit breaker: stop sending requests to an upstream that keeps failing, and try it again later.

A breaker watches the outcomes of the requests it lets through to the engine (its upstream) and is in one of three
states:

* **closed** — every request goes through; the last :attr:`BreakerConfig.window` outcomes are kept. When at least
  :attr:`~BreakerConfig.min_requests` of them are known and the share that failed reaches
  :attr:`~BreakerConfig.error_ratio`, the breaker opens.
* **open** — every request is refused at once (503 with ``Retry-After``: the time left until the breaker tries the
  upstream again) for :attr:`~BreakerConfig.open_s` seconds; nothing reaches the engine.
* **half-open** — after that time, one request (the probe) goes through and the others are still refused. The
  probe's success closes the breaker (with a fresh window); its failure opens it for another
  :attr:`~BreakerConfig.open_s`. A probe whose client went away decides nothing: the next request is the probe.

Failures are the upstream's own (the engine could not produce the answer: 5xx), never the client's (a bad request, a
refused rate, a client that hung up). All times are seconds on a monotonic clock, passed in (``now_s``) so tests and
the lab's handlers share one clock and the state machine is deterministic.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    """Where the breaker stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """When the breaker opens and for how long.

    Fields:
        error_ratio: the share of failed requests among the last ``window`` that opens the breaker, in (0, 1].
        window: outcomes kept while closed (the most recent ones).
        min_requests: outcomes needed before the ratio counts (one failure in one request is not a trend).
        open_s: how long the breaker stays open before it lets a probe through, s.
    """

    error_ratio: float = 0.5
    window: int = 20
    min_requests: int = 10
    open_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0.0 < self.error_ratio <= 1.0:
            raise ValueError(f"BreakerConfig.error_ratio must be in (0, 1], got {self.error_ratio!r}")
        if self.window < 1 or not 1 <= self.min_requests <= self.window:
            raise ValueError(
                f"BreakerConfig needs 1 <= min_requests <= window, got {self.min_requests!r} and {self.window!r}"
            )
        if not self.open_s > 0.0:  # also rejects NaN
            raise ValueError(f"BreakerConfig.open_s must be > 0, got {self.open_s!r}")


@dataclass(frozen=True, slots=True)
class Admission:
    """The breaker's answer to one request.

    Fields:
        admitted: the request may go to the upstream.
        probe: it is the half-open breaker's probe: its outcome decides whether the breaker closes.
        retry_after_s: for a refused request, when to come back, s (the time left open; ``open_s`` while a probe
            runs, as its outcome is not known yet).
    """

    admitted: bool
    probe: bool = False
    retry_after_s: float = 0.0

    @property
    def retry_after_header(self) -> bytes:
        """``Retry-After`` in whole seconds, rounded up (at least 1: "0" would invite an immediate retry)."""
        return str(max(1, math.ceil(self.retry_after_s))).encode()


_ADMITTED = Admission(True)


class CircuitBreaker:
    """One breaker in front of one upstream (the lab's engine); see the module docstring. Not thread-safe: the lab
    calls it from its event loop only."""

    def __init__(self, config: BreakerConfig) -> None:
        self.config = config
        self.state = BreakerState.CLOSED
        self.opened = 0  #: times the breaker opened
        self.refused = 0  #: requests refused while open or half-open
        self._outcomes: deque[bool] = deque(maxlen=config.window)  # True: the request failed
        self._opened_at_s = 0.0
        self._probe_running = False

    @property
    def error_ratio(self) -> float | None:
        """The failed share of the outcomes the closed breaker holds (None before any)."""
        return sum(self._outcomes) / len(self._outcomes) if self._outcomes else None

    def admit(self, now_s: float) -> Admission:
        """Whether a request arriving at ``now_s`` may go to the upstream."""
        if self.state is BreakerState.CLOSED:
            return _ADMITTED
        if self.state is BreakerState.OPEN:
            left = self._opened_at_s + self.config.open_s - now_s
            if left > 0.0:
                self.refused += 1
                return Admission(False, retry_after_s=left)
            self.state = BreakerState.HALF_OPEN
        if self._probe_running:
            self.refused += 1
            return Admission(False, retry_after_s=self.config.open_s)
        self._probe_running = True
        return Admission(True, probe=True)

    def record(self, admission: Admission, failed: bool | None, now_s: float) -> None:
        """The outcome of a request ``admission`` let through: ``failed`` True when the upstream failed it, False
        when it answered, None when nothing was learnt (the client went away first)."""
        if not admission.admitted:
            return
        if admission.probe:
            self._probe_running = False
            if failed is None:
                return  # still half-open: the next request probes
            if failed:
                self._open(now_s)
            else:
                self.state = BreakerState.CLOSED
                self._outcomes.clear()
            return
        if failed is None or self.state is not BreakerState.CLOSED:
            return  # an outcome from before the breaker opened decides nothing now
        self._outcomes.append(failed)
        ratio = self.error_ratio
        if len(self._outcomes) >= self.config.min_requests and ratio is not None and ratio >= self.config.error_ratio:
            self._open(now_s)

    def _open(self, now_s: float) -> None:
        self.state = BreakerState.OPEN
        self.opened += 1
        self._opened_at_s = now_s
        self._outcomes.clear()
