"""Failure summaries: grouped by cause, one sentence."""

from __future__ import annotations

from latscope.checks import failures
from tests.checks.builders import failed, ok, reset


def test_failures_are_grouped_by_cause_most_common_first() -> None:
    samples = [failed("a"), failed("b"), reset("c"), ok("d")]
    assert failures.summarise(samples, 4) == (
        "3 of 4 requests failed: HTTP 429 (rate limited) (2), stream: connection reset by peer while reading"
    )
    assert failures.summarise([failed("a")]) == "1 request failed: HTTP 429 (rate limited)"
    assert failures.summarise([ok()]) is None


def test_too_many_failed_allows_a_quarter() -> None:
    assert failures.too_many_failed([failed(), ok(), ok(), ok()]) is None
    assert failures.too_many_failed([failed(), failed(), ok(), ok()]) is not None
    assert failures.too_many_failed([failed()], ok_elsewhere=3) is None
    assert failures.rate_limited([ok(), failed()]) and not failures.rate_limited([reset()])
