"""``retry-amplification`` on synthetic bench evidence: finding, clear, not tested."""

from __future__ import annotations

import dataclasses

from latscope.checks.retries import MIN_SHARE, RetryEvidence, check_retry_amplification
from latscope.findings import Clear, Finding, NotTested, Severity

#: 100 logical requests of 1 s each, none retried, the client ready to retry up to 3 times with keys.
QUIET = RetryEvidence(
    retries_allowed=3,
    idempotency_keys=True,
    requests=100,
    attempts=100,
    retried=0,
    unkeyed_retries=0,
    retry_ms=0.0,
    retry_wait_ms=0.0,
    request_ms=100_000.0,
)


def test_a_run_without_retries_configured_is_not_tested() -> None:
    outcome = check_retry_amplification(dataclasses.replace(QUIET, retries_allowed=0, idempotency_keys=False))
    assert isinstance(outcome, NotTested) and "--retries" in outcome.reason


def test_a_run_that_measured_nothing_is_not_tested() -> None:
    assert isinstance(check_retry_amplification(dataclasses.replace(QUIET, requests=0, attempts=0)), NotTested)


def test_no_retry_needed_is_clear() -> None:
    outcome = check_retry_amplification(QUIET)
    assert isinstance(outcome, Clear) and "no request" in outcome.reason


def test_a_few_cheap_keyed_retries_are_clear() -> None:
    ev = dataclasses.replace(QUIET, attempts=103, retried=3, retry_ms=0.01 * 100_000.0, retry_wait_ms=900.0)
    outcome = check_retry_amplification(ev)
    assert isinstance(outcome, Clear) and outcome.evidence["retry_share_pct"] == 1.0


def test_retries_taking_a_large_share_of_the_time_are_a_high_finding() -> None:
    # 40 of 100 requests retried; 40 s of their 100 s went into refused attempts and backoff
    ev = dataclasses.replace(QUIET, attempts=180, retried=40, retry_ms=40_000.0, retry_wait_ms=38_000.0)
    outcome = check_retry_amplification(ev)
    assert isinstance(outcome, Finding) and outcome.severity is Severity.HIGH
    assert outcome.cost_ms == 400.0  # per logical request, on average
    assert outcome.evidence["attempts_per_request"] == 1.8 and outcome.evidence["retry_share_pct"] == 40.0


def test_a_share_just_over_the_threshold_is_a_medium_finding() -> None:
    ev = dataclasses.replace(QUIET, attempts=110, retried=10, retry_ms=(MIN_SHARE + 0.01) * 100_000.0)
    outcome = check_retry_amplification(ev)
    assert isinstance(outcome, Finding) and outcome.severity is Severity.MEDIUM


def test_cheap_retries_without_idempotency_keys_are_still_a_finding() -> None:
    ev = dataclasses.replace(
        QUIET, idempotency_keys=False, attempts=102, retried=2, unkeyed_retries=2, retry_ms=200.0, retry_wait_ms=150.0
    )
    outcome = check_retry_amplification(ev)
    assert isinstance(outcome, Finding) and outcome.severity is Severity.MEDIUM
    assert "without an Idempotency-Key" in outcome.rule
    assert outcome.evidence["retries_without_idempotency_key"] == 2


def test_a_keyed_retry_the_server_generated_again_is_a_high_finding() -> None:
    # two cheap keyed retries, but one came back as another response than the one its first attempt had begun
    ev = dataclasses.replace(QUIET, attempts=102, retried=2, retry_ms=100.0, retry_wait_ms=50.0, executed_again=1)
    outcome = check_retry_amplification(ev)
    assert isinstance(outcome, Finding) and outcome.severity is Severity.HIGH
    assert "generated again" in outcome.rule and outcome.evidence["keyed_requests_executed_again"] == 1
    replayed = check_retry_amplification(dataclasses.replace(ev, executed_again=0))
    assert isinstance(replayed, Clear)  # the same retries, answered with the first response: nothing to name
