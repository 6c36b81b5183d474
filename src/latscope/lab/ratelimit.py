"""The gateway's rate limiter: a token bucket per API key on requests per minute and tokens per minute.

Each key (the ``Authorization`` bearer value, held only as a SHA-256 digest so the credential is never kept, printed
or logged) has two buckets: one of requests, one of tokens (prompt tokens plus ``max_tokens``, what OpenAI counts
against a tokens-per-minute limit before it knows how many the answer will use). A bucket holds at most its burst
(by default the whole per-minute limit) and refills continuously at limit/60 per second, so a client may spend a
burst at once and then one unit per refill interval.

Two modes:

- ``reject``: a request that does not fit is refused at once (429) and told when it would fit (``Retry-After``,
  OpenAI's ``retry-after-ms`` and ``x-ratelimit-*`` headers, IETF ``RateLimit`` / ``RateLimit-Policy``).
- ``queue``: a request that does not fit reserves its share of the buckets (they go into debt) and waits quietly
  until the refill has paid for it, before it reaches the scheduler; when that wait would exceed the queue's bound
  (``max_wait_s``) it is refused with 429 as in reject mode. The client sees a slower first byte and nothing else.

Pure state and arithmetic: the clock is passed in (monotonic seconds), so the limiter is tested deterministically;
the gateway does the sleeping.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from enum import StrEnum

#: A bucket's refill period: limits are per minute (OpenAI's RPM and TPM).
WINDOW_S = 60.0


class LimitMode(StrEnum):
    """What the gateway does with a request beyond the rate."""

    REJECT = "reject"  #: 429 at once, with Retry-After
    QUEUE = "queue"  #: wait (bounded) before the scheduler; 429 when the wait would exceed the bound


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """A limiter's settings. ``requests_per_min`` / ``tokens_per_min``: the limits (None: that dimension is not
    limited); ``burst``: the requests bucket's size, requests (the tokens bucket is scaled by the same ratio), None
    for a whole minute's quota; ``max_wait_s``: in queue mode, the
    longest a request may wait before it is refused instead."""

    mode: LimitMode = LimitMode.REJECT
    requests_per_min: int | None = None
    tokens_per_min: int | None = None
    burst: int | None = None
    max_wait_s: float = 2.0

    @property
    def enabled(self) -> bool:
        """True when some dimension is limited."""
        return self.requests_per_min is not None or self.tokens_per_min is not None

    def capacity(self, per_min: int) -> float:
        """The bucket size of a dimension limited to ``per_min`` units per minute."""
        if self.burst is None or self.requests_per_min is None:
            return float(per_min)
        return max(1.0, per_min * self.burst / self.requests_per_min)


@dataclass(slots=True)
class TokenBucket:
    """``level`` units available now (negative: owed by queued requests), at most ``capacity``; refills at
    ``limit / WINDOW_S`` per second from ``updated_s`` (monotonic seconds)."""

    limit: int  #: units per minute
    capacity: float
    level: float
    updated_s: float

    @property
    def rate_per_s(self) -> float:
        return self.limit / WINDOW_S

    def refill(self, now_s: float) -> None:
        """Add what the time since the last update refilled (never beyond ``capacity``)."""
        elapsed = max(0.0, now_s - self.updated_s)
        self.level = min(self.capacity, self.level + elapsed * self.rate_per_s)
        self.updated_s = max(self.updated_s, now_s)

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` units are available (0 when they are now); infinite when it exceeds capacity."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level) / self.rate_per_s)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) / self.rate_per_s)


@dataclass(frozen=True, slots=True)
class Quota:
    """One dimension's state after a decision, for the response headers: limit per minute, units remaining
    (floored at 0), seconds until the bucket is full again, seconds until one more unit is available."""

    dimension: str  #: ``requests`` or ``tokens``
    limit: int
    remaining: int
    reset_s: float
    next_unit_s: float


@dataclass(frozen=True, slots=True)
class Admission:
    """The limiter's answer for one request.

    ``admitted``: it may go on (after ``wait_s`` seconds, > 0 only in queue mode); otherwise it is refused and
    ``retry_after_s`` says when it would fit. ``quotas``: each limited dimension's state, for the headers.
    """

    admitted: bool
    wait_s: float = 0.0
    retry_after_s: float | None = None
    quotas: tuple[Quota, ...] = ()


def key_digest(credential: bytes | None) -> str:
    """The bucket key of a credential: a SHA-256 digest, so the limiter never holds the credential itself."""
    return hashlib.sha256(credential or b"").hexdigest()


@dataclass(slots=True)
class RateLimiter:
    """Token buckets per key (see the module docstring)."""

    config: RateLimitConfig
    _buckets: dict[str, dict[str, TokenBucket]] = field(default_factory=dict)

    def _limits(self) -> dict[str, int]:
        limits = {"requests": self.config.requests_per_min, "tokens": self.config.tokens_per_min}
        return {name: value for name, value in limits.items() if value is not None}

    def _for(self, key: str, now_s: float) -> dict[str, TokenBucket]:
        buckets = self._buckets.get(key)
        if buckets is None:
            buckets = {}
            for name, limit in self._limits().items():
                capacity = self.config.capacity(limit)
                buckets[name] = TokenBucket(limit, capacity, capacity, now_s)
            self._buckets[key] = buckets
        for bucket in buckets.values():
            bucket.refill(now_s)
        return buckets

    def admit(self, key: str, tokens: int, now_s: float) -> Admission:
        """Decide for one request of ``tokens`` tokens under ``key`` (a :func:`key_digest`) at ``now_s``."""
        buckets = self._for(key, now_s)
        cost = {"requests": 1.0, "tokens": float(tokens)}
        wait = max((bucket.wait_for(cost[name]) for name, bucket in buckets.items()), default=0.0)
        queue = self.config.mode is LimitMode.QUEUE
        if wait > 0.0 and not (queue and wait <= self.config.max_wait_s):
            return Admission(False, retry_after_s=wait, quotas=self._quotas(buckets))
        for name, bucket in buckets.items():
            bucket.level -= cost[name]
        return Admission(True, wait_s=wait, quotas=self._quotas(buckets))

    @staticmethod
    def _quotas(buckets: dict[str, TokenBucket]) -> tuple[Quota, ...]:
        return tuple(
            Quota(name, bucket.limit, max(0, math.floor(bucket.level)), bucket.reset_s(), bucket.wait_for(1.0))
            for name, bucket in buckets.items()
        )


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*``: ``1s``, ``6m0s``, ``12ms`` (Go's format)."""
    if seconds < 1.0:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes >= 1 else text


def limit_headers(admission: Admission) -> list[tuple[bytes, bytes]]:
    """The rate-limit headers of a response: OpenAI's ``x-ratelimit-{limit,remaining,reset}-{dimension}``, the
    IETF draft's ``RateLimit-Policy`` and ``RateLimit`` (draft-ietf-httpapi-ratelimit-headers, structured fields:
    quota ``q`` per window ``w`` seconds, remaining ``r``, ``t`` seconds until more), and on a refusal ``Retry-After``
    (whole seconds, RFC 9110 §10.2.3, rounded up) with OpenAI's ``retry-after-ms``."""
    headers: list[tuple[bytes, bytes]] = []
    policies: list[str] = []
    states: list[str] = []
    for quota in admission.quotas:
        headers += [
            (f"x-ratelimit-limit-{quota.dimension}".encode(), str(quota.limit).encode()),
            (f"x-ratelimit-remaining-{quota.dimension}".encode(), str(quota.remaining).encode()),
            (f"x-ratelimit-reset-{quota.dimension}".encode(), go_duration(quota.reset_s).encode()),
        ]
        unit = "" if quota.dimension == "requests" else ';qu="tokens"'
        policies.append(f'"{quota.dimension}";q={quota.limit};w={int(WINDOW_S)}{unit}')
        until_more = 0 if quota.remaining > 0 else math.ceil(quota.next_unit_s)
        states.append(f'"{quota.dimension}";r={quota.remaining};t={until_more}')
    if policies:
        headers += [(b"ratelimit-policy", ", ".join(policies).encode()), (b"ratelimit", ", ".join(states).encode())]
    if admission.retry_after_s is not None:
        retry = admission.retry_after_s
        headers += [
            (b"retry-after", str(max(1, math.ceil(retry))).encode()),
            (b"retry-after-ms", str(max(1, math.ceil(retry * 1000))).encode()),
        ]
    return headers
