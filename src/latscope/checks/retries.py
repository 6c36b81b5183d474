"""``retry-amplification``: the client's retries cost its users time, or risk executing a request twice.

Mechanism: a refused or failed attempt costs the time it took, then the client waits (backoff, ``Retry-After``) and
sends it again; a user waits for all of it. Under a rate limit, retries that come back too early are refused again
and make the queue of refused requests longer (the amplification). A retry of a generation request without an
``Idempotency-Key`` may be executed twice by the server (the first attempt may have run after all: a connection lost
after the server started it), paying for the generation twice.

Evidence comes from a ``latscope bench`` run with ``--retries``: per logical request its attempts and the time from
its first attempt's start to its last attempt's start (earlier attempts and the waits after them). A finding needs
that time to be a noticeable share of the time the logical requests took, or any retry sent without a key, or a
keyed retry the server generated again: a server that honours ``Idempotency-Key`` answers a retry of a request it
had begun with that request's response (the same id, a replay), so a retry whose stream names another response id
than the one an earlier attempt had begun streaming was executed twice. Not tested
without retries configured: a client that never retries cannot amplify anything, and the run cannot tell what
retries would have cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.findings import Clear, Confidence, NotTested, Outcome, Severity, make_finding

RETRY_AMPLIFICATION_ID = "retry-amplification"

#: Share of the logical requests' time spent in retries and backoff from which it is a finding: one twentieth, the
#: share of the typical request from which the other checks' findings are worth fixing (checks.severity).
MIN_SHARE = 0.05
#: From this share, high: a quarter of the users' wait went into refused attempts and waiting (checks.severity).
HIGH_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class RetryEvidence:
    """What a bench step's logical requests did about retries. Times in ms, summed over the measured requests."""

    retries_allowed: int  #: ``--retries``: attempts allowed after the first (0: the client never retried)
    idempotency_keys: bool  #: ``--idempotency-keys``: every logical request carried one key on all its attempts
    requests: int  #: measured logical requests
    attempts: int  #: attempts they took (``requests`` when none was retried)
    retried: int  #: logical requests sent more than once
    unkeyed_retries: int  #: retries sent without an ``Idempotency-Key``
    retry_ms: float  #: time in earlier attempts and the waits after them (first attempt's start → last's start)
    retry_wait_ms: float  #: the waiting part of ``retry_ms`` (backoff and Retry-After)
    request_ms: float  #: the logical requests' own time (first attempt's start → end)
    #: keyed logical requests the server generated a second time: an earlier attempt had begun streaming a response
    #: (named its id, delivered tokens) and the one that ended it was another (a replay keeps the id)
    executed_again: int = 0

    @property
    def share(self) -> float:
        """``retry_ms`` as a share of ``request_ms`` (0 when nothing was measured)."""
        return self.retry_ms / self.request_ms if self.request_ms > 0 else 0.0

    @property
    def attempts_per_request(self) -> float:
        """Attempts per logical request (1.0 without retries)."""
        return self.attempts / self.requests if self.requests else 0.0


def _evidence(ev: RetryEvidence) -> dict[str, Any]:
    return {
        "retries_allowed": ev.retries_allowed,
        "idempotency_keys": ev.idempotency_keys,
        "requests": ev.requests,
        "attempts": ev.attempts,
        "attempts_per_request": round(ev.attempts_per_request, 3),
        "retried_requests": ev.retried,
        "retries_without_idempotency_key": ev.unkeyed_retries,
        "keyed_requests_executed_again": ev.executed_again,
        "retry_ms_total": round(ev.retry_ms, 3),
        "retry_wait_ms_total": round(ev.retry_wait_ms, 3),
        "request_ms_total": round(ev.request_ms, 3),
        "retry_share_pct": round(100.0 * ev.share, 2),
    }


def check_retry_amplification(ev: RetryEvidence) -> Outcome:
    """Finding when retries and backoff took at least :data:`MIN_SHARE` of the logical requests' time, or any retry
    went without an idempotency key; cost = the mean time retries added per logical request. Clear when the client
    retried (or was ready to) and neither happened. Not tested without retries configured or measured requests."""
    if ev.retries_allowed <= 0:
        return NotTested(
            RETRY_AMPLIFICATION_ID,
            "the run sent every request once (no --retries): what retries would cost is not measured",
        )
    if ev.requests <= 0:
        return NotTested(RETRY_AMPLIFICATION_ID, "the run measured no request")
    evidence = _evidence(ev)
    share = ev.share
    if share < MIN_SHARE and ev.unkeyed_retries == 0 and ev.executed_again == 0:
        if ev.retried == 0:
            reason = f"no request of {ev.requests} needed a retry (up to {ev.retries_allowed} were allowed)"
        else:
            reason = (
                f"{ev.retried} of {ev.requests} requests were retried, every retry with an idempotency key, and "
                f"retries took {share:.1%} of their time (under {MIN_SHARE:.0%})"
            )
        return Clear(RETRY_AMPLIFICATION_ID, reason, evidence)
    severity = Severity.HIGH if share >= HIGH_SHARE else Severity.MEDIUM if share >= MIN_SHARE else Severity.LOW
    rules = []
    if share >= MIN_SHARE:
        rules.append(
            f"retries and backoff took {share:.1%} of the logical requests' time (at least {MIN_SHARE:.0%}); "
            f"{ev.attempts_per_request:.2f} attempts per request"
        )
    if ev.unkeyed_retries:
        # a retried generation without a key may run twice on the server: never below medium
        if severity is Severity.LOW:
            severity = Severity.MEDIUM
        rules.append(
            f"{ev.unkeyed_retries} retr{'y' if ev.unkeyed_retries == 1 else 'ies'} sent without an Idempotency-Key "
            "(the server may execute the request twice)"
        )
    if ev.executed_again:
        # the key was sent and the server generated again anyway: it pays (and bills) twice, and the caller got a
        # different answer from the one it had begun to show
        severity = Severity.HIGH
        rules.append(
            f"{ev.executed_again} keyed request{'s' if ev.executed_again != 1 else ''} generated again: an earlier "
            "attempt had begun streaming one response and the retry got another (a new response id) despite the same "
            "Idempotency-Key, so the server does not dedupe on it"
        )
    return make_finding(
        RETRY_AMPLIFICATION_ID,
        severity=severity,
        cost_ms=ev.retry_ms / ev.requests,
        cost_basis=(
            f"ms added per logical request on average by earlier attempts and the waits after them ({ev.retried} of "
            f"{ev.requests} requests retried; {ev.retry_wait_ms / ev.requests:.1f} ms of it waiting)"
        ),
        evidence=evidence,
        rule="; ".join(rules),
        confidence=Confidence.HIGH,
    )
