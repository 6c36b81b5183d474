"""Failure summaries: grouped by cause, one sentence."""

from __future__ import annotations

from latscope.checks import failures
from latscope.checks.samples import RequestSample
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


def test_refused_covers_client_errors_and_streams_that_end_without_a_token() -> None:
    assert failed(status=400, message="context_length_exceeded").refused
    assert failed(status=413, message="too large").refused
    assert not failed(status=429).refused  # overloaded, not refused
    assert not failed(status=500, message="boom").refused
    # llama-cpp-python's answer to a streamed prompt over its context: 200 and an empty chunked body
    empty = RequestSample("r", error_kind="empty", error_phase="stream", status=200, events=0)
    assert empty.refused and "no token" in failures.describe(empty)
    in_stream = RequestSample("r", error_kind="api-error", error_phase="stream", status=200, events=1, error_events=1)
    assert in_stream.refused
    assert not ok(status=200, events=4, output_tokens=3, ttft_ms=5.0).refused
    # role + finish and no token: a stream without a token (a failure), but not a refusal of the prompt
    assert not RequestSample("r", error_kind="empty", error_phase="stream", status=200, events=2).refused
