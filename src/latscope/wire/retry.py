"""Retries: send a logical request again after a refusal or a lost connection, the way a careful client does.

A *logical request* is what the caller asked for; each time it goes on the wire is an *attempt* with a timeline of
its own. :func:`request_with_retries` sends attempts until one is answered, the outcome is not worth retrying, or the
policy's retries are spent, and returns the last attempt's timeline with the earlier ones summarised in
:attr:`~latscope.timeline.model.Timeline.retries` (number, status, error, the server's advice, the wait after it).

What is retried (:func:`decide`):

* ``429`` (rate limited), ``502``, ``503``, ``504`` (a gateway or an overloaded server: RFC 9110 §15.6), and ``409``
  when an ``Idempotency-Key`` was sent (a duplicate that arrived while the first was still running: its answer will
  be there later);
* a connection that failed before any token came (refused, reset, closed, lost, timed out, an HTTP/2 GOAWAY);
* anything the server marked ``x-should-retry: true`` (OpenAI's hint, honoured as its SDKs do); never an answer it
  marked ``x-should-retry: false``, whatever its status.

A stream that already delivered tokens is not sent again without an idempotency key: the server has spent the
generation, the caller has shown part of it, and a second attempt would generate (and bill) it again. With a key the
server can replay the stored answer or make the retry wait for the first one, so it is sent again.

How long to wait (:meth:`RetryPolicy.wait_s`): exponential backoff with full jitter, a uniform draw from
``[0, min(max_backoff, backoff × 2^(retry−1))]`` (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015: it
spreads a crowd of refused clients instead of bringing them back together), but never less than the server's
``retry-after-ms`` / ``Retry-After`` (RFC 9110 §10.2.3). Why not the server's wait alone, as the OpenAI and Anthropic
SDKs do: a limiter tells every request it refuses in the same moment the same wait, so they all come back together
and all but one are refused again (the lab's rate limiter in reject mode: the draw under it took about half the
attempts and left no request out of retries, for a longer tail). The wait runs from the moment the refused attempt
ended, and the next attempt never starts before it is over. A server that asks for more than ``max_wait_s`` ends the
logical request there: waiting that long is the caller's decision, not a load generator's.

Every loop here is bounded: at most ``retries + 1`` attempts, each wait at most ``max_wait_s``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from latscope.dialects.base import RequestSpec
from latscope.signals.ratelimit import rate_limit_state
from latscope.timeline.model import TOKEN_KINDS, Attempt, ErrorKind, Timeline
from latscope.wire.client import Client
from latscope.wire.phase import after

#: Statuses worth sending again: rate limited, bad gateway, unavailable, gateway timeout (RFC 9110 §15.6).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Conflict: with an idempotency key, a duplicate that arrived while the first attempt still ran (the IETF
#: draft-ietf-httpapi-idempotency-key-header §2.6); worth retrying only when a key was sent.
KEYED_RETRY_STATUSES = frozenset({409})
#: Failures of the connection, not of the request: nothing says the server saw it, so it may be sent again (before any
#: token; see the module docstring for a stream cut after tokens).
RETRY_ERRORS = frozenset(
    {
        ErrorKind.REFUSED,
        ErrorKind.CONNECT,
        ErrorKind.CLOSED,
        ErrorKind.RESET,
        ErrorKind.LOST,
        ErrorKind.TRUNCATED,
        ErrorKind.GOAWAY,
        ErrorKind.TIMEOUT,
    }
)

#: The first retry's backoff ceiling, s: the OpenAI and Anthropic SDKs start at 0.5 s.
DEFAULT_BACKOFF_S = 0.5
#: The largest backoff ceiling, s (the SDKs cap theirs at 8 s).
DEFAULT_MAX_BACKOFF_S = 8.0
#: A server that asks for a longer wait ends the logical request instead, s (the OpenAI SDK honours Retry-After up
#: to 60 s).
DEFAULT_MAX_WAIT_S = 60.0
#: Asleep, an event loop may wake a timer's resolution early (uvloop: whole milliseconds); each sleep adds this much,
#: s, so the next attempt never starts before the wait is over.
SLEEP_MARGIN_S = 0.001
#: Sleeps per wait at most (each normally ends it; more would mean the clock misbehaves).
MAX_SLEEPS = 4

#: The request header that carries the key (draft-ietf-httpapi-idempotency-key-header).
IDEMPOTENCY_HEADER = "idempotency-key"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a logical request is retried. Durations in seconds.

    ``retries``: attempts after the first (0: never retry); ``backoff_s`` and ``max_backoff_s``: the full-jitter
    backoff's first and largest ceilings; ``max_wait_s``: the longest server-requested wait honoured (longer ends the
    logical request); ``idempotency_keys``: send one fresh ``Idempotency-Key`` (a UUID4) with every attempt of a
    logical request.
    """

    retries: int = 0
    backoff_s: float = DEFAULT_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    idempotency_keys: bool = False

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if not (self.backoff_s >= 0 and self.max_backoff_s >= 0 and self.max_wait_s >= 0):
            raise ValueError("backoff and wait limits must be >= 0 s")

    def backoff_ceiling_s(self, retry: int) -> float:
        """The backoff ceiling before retry number ``retry`` (1 for the first): ``backoff × 2^(retry−1)``, capped."""
        exponent = min(max(retry - 1, 0), 62)  # 2**62 s is past any cap; bounded so the float stays finite
        return float(min(self.max_backoff_s, self.backoff_s * 2.0**exponent))

    def wait_s(self, retry: int, retry_after_s: float | None, rng: random.Random) -> float:
        """How long to wait before retry ``retry``: a full-jitter draw below :meth:`backoff_ceiling_s`, at least the
        server's ``retry_after_s`` (the module docstring says why both)."""
        drawn = rng.uniform(0.0, self.backoff_ceiling_s(retry))
        return max(drawn, retry_after_s or 0.0)


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Whether a finished attempt is worth sending again, why, and what the server advised."""

    retry: bool
    reason: str  #: e.g. "429", "reset before any token", "x-should-retry: false"
    retry_after_s: float | None = None  #: ``retry-after-ms`` / ``Retry-After``, s
    should_retry: bool | None = None  #: ``x-should-retry``


def token_events(t: Timeline) -> int:
    """Token-bearing stream events the attempt delivered."""
    return sum(1 for e in t.events if e.kind in TOKEN_KINDS)


def decide(t: Timeline, *, keyed: bool) -> RetryDecision:
    """Whether attempt ``t`` is worth sending again (the module docstring has the rules); ``keyed``: an
    ``Idempotency-Key`` went with it."""
    if t.ok:
        return RetryDecision(False, "answered")
    state = rate_limit_state(t.response_headers, time.time()) if t.response_headers else None
    after = state.retry_after_s if state is not None else None
    should = state.should_retry if state is not None else None
    if should is False:
        return RetryDecision(False, "the server said x-should-retry: false", after, should)
    if t.first_token_ns is not None and not keyed:
        return RetryDecision(False, "tokens were delivered and no idempotency key was sent", after, should)
    err = t.error
    status = t.status
    if status is not None and status >= 400:
        if status in RETRY_STATUSES or (keyed and status in KEYED_RETRY_STATUSES):
            return RetryDecision(True, str(status), after, should)
        if should is True:
            return RetryDecision(True, f"{status} with x-should-retry: true", after, should)
        return RetryDecision(False, f"{status} is not worth retrying", after, should)
    if err is not None and (err.kind in RETRY_ERRORS or should is True):
        where = "after tokens" if t.first_token_ns is not None else "before any token"
        return RetryDecision(True, f"{err.kind} in {err.phase} {where}", after, should)
    kind = err.kind if err is not None else "unfinished"
    return RetryDecision(False, f"{kind} is not worth retrying", after, should)


def new_idempotency_key() -> str:
    """A fresh key for one logical request: a random UUID (version 4), as Stripe and the IETF draft suggest."""
    return str(uuid.uuid4())


async def sleep_until_ns(deadline_ns: int) -> None:
    """Sleep until the monotonic clock reads ``deadline_ns`` or later (never earlier; at most :data:`MAX_SLEEPS`)."""
    for _ in range(MAX_SLEEPS):
        remaining_ns = deadline_ns - time.monotonic_ns()
        if remaining_ns <= 0:
            return
        await asyncio.sleep(remaining_ns / 1e9 + SLEEP_MARGIN_S)


async def request_with_retries(
    client: Client,
    spec: RequestSpec,
    base_url: str,
    policy: RetryPolicy,
    *,
    rng: random.Random | None = None,
    headers: Sequence[tuple[str, str]] = (),
    new_connection: bool = False,
    label: str | None = None,
    scheduled_ns: int | None = None,
    timeline: Timeline | None = None,
) -> Timeline:
    """Send ``spec`` as one logical request under ``policy``; return its last attempt's timeline, the earlier
    attempts in its ``retries``. Arguments as :meth:`Client.request`; ``rng`` draws the jitter (a seeded one makes
    the waits reproducible). Like :meth:`Client.request` it never raises because the request failed.

    Cancelled while it waits between attempts, the timeline keeps the last attempt (its error) and a warning says
    which retry the wait was for.
    """
    draw = rng if rng is not None else random.Random()
    t = timeline if timeline is not None else Timeline()
    key = new_idempotency_key() if policy.idempotency_keys else None
    sent_headers = (*headers, (IDEMPOTENCY_HEADER, key)) if key is not None else tuple(headers)
    earlier: list[Attempt] = []
    for number in range(1, policy.retries + 2):
        if number > 1:
            t.__init__()  # type: ignore[misc]  # the same record, emptied: the caller may hold it
        await client.request(
            spec,
            base_url,
            headers=sent_headers,
            new_connection=new_connection,
            label=label,
            scheduled_ns=scheduled_ns,
            timeline=t,
        )
        t.retries = list(earlier)
        t.idempotency_key = key
        if t.ok or number > policy.retries:
            break
        decision = decide(t, keyed=key is not None)
        if not decision.retry:
            break
        if decision.retry_after_s is not None and decision.retry_after_s > policy.max_wait_s:
            t.warnings.append(
                f"not retried: the server asked to wait {decision.retry_after_s:g} s, more than the "
                f"{policy.max_wait_s:g} s limit"
            )
            break
        ended_ns = t.ended_ns if t.ended_ns is not None else time.monotonic_ns()
        deadline_ns = after(ended_ns, policy.wait_s(number, decision.retry_after_s, draw))
        try:
            await sleep_until_ns(deadline_ns)
        except asyncio.CancelledError:
            t.warnings.append(f"cancelled while waiting to send retry {number}")
            raise
        earlier.append(
            Attempt(
                number=number,
                started_ns=t.started_ns,
                ended_ns=ended_ns,
                status=t.status,
                error=t.error,
                tokens=token_events(t),
                retry_after_ms=None if decision.retry_after_s is None else decision.retry_after_s * 1000.0,
                should_retry=decision.should_retry,
                wait_ns=time.monotonic_ns() - ended_ns,
                response_id=t.response_id,
            )
        )
    return t
