"""Rate-limit headers of every dialect normalised into RateLimitState (limits as counts, resets in seconds)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from latscope.signals.ratelimit import RateLimitWindow, rate_limit_state

NOW = datetime(2025, 1, 15, 10, 0, 0, tzinfo=UTC)
NOW_S = NOW.timestamp()


def test_openai_headers_with_go_duration_resets() -> None:
    headers = [
        ("x-ratelimit-limit-requests", "10000"),
        ("x-ratelimit-limit-tokens", "2000000"),
        ("x-ratelimit-remaining-requests", "9999"),
        ("x-ratelimit-remaining-tokens", "1999979"),
        ("x-ratelimit-reset-requests", "6ms"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]
    state = rate_limit_state(headers, NOW)
    assert state.windows == (
        RateLimitWindow("requests", 10000, 9999, 6 * 1e-3, source="openai"),
        RateLimitWindow("tokens", 2000000, 1999979, 360.0, source="openai"),
    )


def test_anthropic_rfc3339_resets_are_seconds_from_now() -> None:
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2025-01-15T10:00:30Z",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": "2025-01-15T10:00:00.250Z",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "7990",
        "anthropic-ratelimit-output-tokens-reset": "2025-01-15T09:59:00Z",
        "request-id": "req_018EeWyXxfu5pfWkrYcMdjWG",
    }
    state = rate_limit_state(headers, NOW)
    assert state.window("requests") == RateLimitWindow("requests", 50, 49, 30.0, source="anthropic")
    input_tokens = state.window("input-tokens")
    assert input_tokens is not None and input_tokens.reset_s == pytest.approx(0.25)
    assert state.window("output-tokens") == RateLimitWindow("output-tokens", 8000, 7990, 0.0, source="anthropic")
    assert state.exhausted == (input_tokens,)


def test_now_may_be_unix_seconds() -> None:
    state = rate_limit_state({"anthropic-ratelimit-tokens-reset": "2025-01-15T10:01:00Z"}, NOW_S)
    assert state.windows == (RateLimitWindow("tokens", reset_s=60.0, source="anthropic"),)


def test_ietf_structured_fields_join_policy_and_state_by_name() -> None:
    headers = [
        ("RateLimit-Policy", '"burst";q=100;w=60, "daily";q=1000;w=86400'),
        ("RateLimit", '"burst";r=50;t=30'),
    ]
    state = rate_limit_state(headers, NOW)
    assert state.windows == (
        RateLimitWindow("requests", 100, 50, 30.0, 60.0, "burst", "ietf"),
        RateLimitWindow("requests", 1000, None, None, 86400.0, "daily", "ietf"),
    )


def test_ietf_quota_unit_becomes_the_dimension() -> None:
    headers = {"ratelimit-policy": '"bytes";q=1000000;qu="content-bytes";w=10', "ratelimit": '"bytes";r=0;t=4'}
    (window,) = rate_limit_state(headers, NOW).windows
    assert window == RateLimitWindow("content-bytes", 1000000, 0, 4.0, 10.0, "bytes", "ietf")


def test_ietf_state_without_policy_still_counts() -> None:
    (window,) = rate_limit_state({"RateLimit": '"default";r=5;t=2'}, NOW).windows
    assert window == RateLimitWindow("requests", None, 5, 2.0, None, "default", "ietf")


def test_ietf_draft7_dictionary_form() -> None:
    headers = {"RateLimit": "limit=100, remaining=25, reset=5", "RateLimit-Policy": "100;w=60"}
    (window,) = rate_limit_state(headers, NOW).windows
    assert window == RateLimitWindow("requests", 100, 25, 5.0, 60.0, None, "ietf-draft")


def test_older_draft_separate_fields_with_policies_after_the_limit() -> None:
    headers = {"RateLimit-Limit": "10, 10;w=1, 50;w=60", "RateLimit-Remaining": "9", "RateLimit-Reset": "7"}
    (window,) = rate_limit_state(headers, NOW).windows
    assert window == RateLimitWindow("requests", 10, 9, 7.0, source="ietf-draft")


@pytest.mark.parametrize(
    ("reset", "seconds"),
    [
        ("30", 30.0),  # below 1e9: seconds from now
        (str(int(NOW_S) + 30), 30.0),  # Unix seconds
        (str(int(NOW_S * 1000) + 30_000), 30.0),  # Unix milliseconds
        ("Wed, 15 Jan 2025 10:00:45 GMT", 45.0),  # HTTP date
        (str(int(NOW_S) - 100), 0.0),  # already past
    ],
)
def test_x_ratelimit_reset_heuristic(reset: str, seconds: float) -> None:
    headers = {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
    (window,) = rate_limit_state(headers, NOW).windows
    assert window == RateLimitWindow("requests", 60, 0, seconds, source="x-ratelimit")


def test_x_ratelimit_reset_after_is_explicitly_relative() -> None:
    headers = {"X-RateLimit-Reset": str(int(NOW_S) + 30), "X-RateLimit-Reset-After": "2.5"}
    (window,) = rate_limit_state(headers, NOW).windows
    assert window.reset_s == 2.5


@pytest.mark.parametrize(
    ("headers", "seconds", "source"),
    [
        ({"retry-after": "120"}, 120.0, "retry-after"),
        ({"retry-after": "1.5"}, 1.5, "retry-after"),
        ({"retry-after": "Wed, 15 Jan 2025 10:01:00 GMT"}, 60.0, "retry-after"),
        ({"retry-after": "1", "retry-after-ms": "250"}, 0.25, "retry-after-ms"),
        # LiteLLM's proxy passes the provider's headers on prefixed, and its own router's 429 carries only those
        ({"llm_provider-retry-after": "7"}, 7.0, "llm_provider-retry-after"),
        ({"retry-after": "2", "llm_provider-retry-after": "7"}, 2.0, "retry-after"),
    ],
)
def test_retry_after_in_seconds(headers: dict[str, str], seconds: float, source: str) -> None:
    state = rate_limit_state(headers, NOW)
    assert state.retry_after_s == pytest.approx(seconds)
    assert state.retry_after_source == source


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False), ("TRUE", True)])
def test_x_should_retry(value: str, expected: bool) -> None:
    assert rate_limit_state({"x-should-retry": value}, NOW).should_retry is expected


def test_no_rate_limit_headers_is_empty() -> None:
    state = rate_limit_state({"content-type": "text/event-stream"}, NOW)
    assert state.empty and state.windows == () and state.window("requests") is None


@pytest.mark.parametrize(
    "headers",
    [
        {"x-ratelimit-remaining-requests": "-5"},
        {"x-ratelimit-limit-tokens": "lots"},
        {"x-ratelimit-reset-tokens": "soon"},
        {"anthropic-ratelimit-requests-reset": "tomorrow"},
        {"RateLimit": '"burst";r='},
        {"RateLimit-Policy": '"burst";q=100;w=60,'},
        {"RateLimit-Limit": "many"},
        {"X-RateLimit-Reset": "later"},
        {"retry-after": "in a while"},
        {"retry-after-ms": "-3"},
        {"x-should-retry": "maybe"},
    ],
)
def test_malformed_values_are_ignored_with_a_warning(headers: dict[str, str]) -> None:
    warnings: list[str] = []
    state = rate_limit_state(headers, NOW, warnings=warnings)
    assert len(warnings) == 1
    assert all(w.limit is None and w.remaining is None and w.reset_s is None for w in state.windows)
    assert state.retry_after_s is None and state.should_retry is None


def test_a_malformed_field_does_not_hide_the_others() -> None:
    warnings: list[str] = []
    headers = {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "?", "retry-after": "2"}
    state = rate_limit_state(headers, NOW, warnings=warnings)
    assert state.window("requests") == RateLimitWindow("requests", 100, None, None, source="openai")
    assert state.retry_after_s == 2.0
    assert len(warnings) == 1


def test_headers_may_be_a_one_shot_iterator() -> None:
    pairs = iter([("X-RateLimit-Limit", "60"), ("X-RateLimit-Remaining", "59"), ("Retry-After", "3")])
    state = rate_limit_state(pairs, NOW)
    assert state.window("requests") == RateLimitWindow("requests", 60, 59, None, source="x-ratelimit")
    assert state.retry_after_s == 3.0
