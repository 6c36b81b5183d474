"""``rate-limited`` on hand-built evidence: refusals met anywhere in the run, the probe, and what servers said."""

from __future__ import annotations

import pytest

from latscope.checks.ratelimit import (
    RateLimitAnswer,
    RateLimitEvidence,
    RecoveryTry,
    check_rate_limited,
    measured_wait,
)
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Finding, NotTested, Severity
from latscope.signals.ratelimit import rate_limit_state
from tests.checks.builders import REF, failed, ok

#: An OpenAI-style 429: the request quota spent, retry in 1.5 s (``retry-after-ms`` wins over whole seconds).
OPENAI_429 = [
    ("x-ratelimit-limit-requests", "60"),
    ("x-ratelimit-remaining-requests", "0"),
    ("x-ratelimit-reset-requests", "1.5s"),
    ("retry-after", "2"),
    ("retry-after-ms", "1500"),
]
#: An Anthropic-style 429: only whole seconds.
ANTHROPIC_429 = [
    ("anthropic-ratelimit-requests-limit", "50"),
    ("anthropic-ratelimit-requests-remaining", "0"),
    ("anthropic-ratelimit-requests-reset", "2030-01-01T00:00:03Z"),
    ("retry-after", "3"),
]
#: A gateway that says nothing but that the window is spent and resets in 4 s (IETF draft fields, no Retry-After).
IETF_ONLY = [("ratelimit-policy", '"default";q=10;w=60'), ("ratelimit", '"default";r=0;t=4')]


def _answer(headers: list[tuple[str, str]], status: int = 429, experiment: str = "saturation") -> RateLimitAnswer:
    return RateLimitAnswer(experiment, "concurrency 8 round 1 #3", status, rate_limit_state(headers, now=0.0))


def _probe(n: int = 6) -> tuple[RequestSample, ...]:
    return tuple(ok(f"probe {i + 1}/6", status=200) for i in range(n))


def test_refusals_during_other_experiments_are_a_finding_costed_by_retry_after() -> None:
    refusals = (_answer(OPENAI_429), _answer(OPENAI_429, experiment="streaming"), _answer(ANTHROPIC_429))
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(), refusals), REF)
    assert isinstance(outcome, Finding)
    assert outcome.cost_ms == pytest.approx(1500.0)  # median of 1500, 1500, 3000
    assert outcome.severity is not Severity.LOW  # 1.5 s against a 200 ms typical request
    assert outcome.evidence["refused_in"] == ["saturation", "streaming"]
    assert "requests (openai)" in outcome.rule and "requests (anthropic)" in outcome.rule


def test_the_probes_own_refusal_is_a_finding() -> None:
    probe = (ok("probe 1/6", status=200), failed("probe 2/6"))
    outcome = check_rate_limited(RateLimitEvidence(6, probe, (_answer(OPENAI_429, experiment="ratelimit"),)), REF)
    assert isinstance(outcome, Finding) and outcome.evidence["probe_statuses"] == [200, 429]


def test_without_retry_after_the_exhausted_windows_reset_is_the_wait() -> None:
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(), (_answer(IETF_ONLY),)), REF)
    assert isinstance(outcome, Finding) and outcome.cost_ms == pytest.approx(4000.0)


def test_a_503_with_retry_after_is_a_refusal_and_one_without_is_not() -> None:
    assert _answer([("retry-after", "1")], status=503).refused
    assert not _answer([("x-ratelimit-remaining-requests", "5")], status=503).refused


def test_a_bare_429_is_a_finding_whose_wait_is_unknown() -> None:
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(), (_answer([]),)), REF)
    assert isinstance(outcome, Finding) and outcome.cost_ms == 0.0 and "unknown" in outcome.cost_basis


def test_a_probe_that_went_through_is_clear_and_says_what_the_quota_headers_said() -> None:
    quota = RateLimitAnswer("ratelimit", "probe 6/6", 200, rate_limit_state(OPENAI_429[:2], now=0.0))
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(), (), quota), REF)
    assert isinstance(outcome, Clear)
    assert "6 short requests" in outcome.reason and "requests 0 of 60 left (openai)" in outcome.reason


def test_a_server_without_a_limiter_is_clear() -> None:
    outcome = check_rate_limited(RateLimitEvidence(6, _probe()), REF)
    assert isinstance(outcome, Clear) and "quota" not in outcome.reason


def test_nothing_measured_is_not_tested() -> None:
    broken = tuple(
        failed(f"probe {i}", status=None, kind="connect", phase="connect", message="refused") for i in (1, 2)
    )
    assert isinstance(check_rate_limited(RateLimitEvidence(6, broken), REF), NotTested)
    assert isinstance(check_rate_limited(RateLimitEvidence(6), REF), NotTested)


def _retries(*tries: tuple[float, int | None]) -> tuple[RecoveryTry, ...]:
    return tuple(RecoveryTry(after_s, status, status == 200) for after_s, status in tries)


def test_a_bare_429_is_costed_by_the_retry_the_limiter_admitted() -> None:
    recovery = _retries((0.05, 429), (0.15, 429), (0.35, 429), (0.75, 200))
    outcome = check_rate_limited(
        RateLimitEvidence(6, _probe(2), (_answer([], experiment="ratelimit"),), None, recovery), REF
    )
    assert isinstance(outcome, Finding)
    assert outcome.cost_ms == pytest.approx(750.0)
    assert outcome.evidence["measured_wait_ms"] == {"at_least": 350.0, "at_most": 750.0}
    assert outcome.severity is not Severity.LOW  # 0.75 s held back against a 200 ms typical request
    assert "measured" in outcome.cost_basis


def test_a_limiter_that_admits_none_of_the_retries_holds_a_client_at_least_that_long() -> None:
    recovery = _retries((0.05, 429), (0.15, 429), (0.35, 429), (0.75, 429), (1.55, 429), (3.15, 429), (6.35, 429))
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(1), (_answer([]),), None, recovery), REF)
    assert isinstance(outcome, Finding) and outcome.cost_ms == pytest.approx(6350.0)
    assert "at least" in outcome.cost_basis and outcome.evidence["measured_wait_ms"]["at_most"] is None


def test_a_retry_that_failed_otherwise_leaves_the_wait_unknown() -> None:
    recovery = (RecoveryTry(0.05, 429, False), RecoveryTry(0.15, None, False))
    assert measured_wait(recovery) is None
    outcome = check_rate_limited(RateLimitEvidence(6, _probe(1), (_answer([]),), None, recovery), REF)
    assert isinstance(outcome, Finding) and outcome.cost_ms == 0.0 and "unknown" in outcome.cost_basis
