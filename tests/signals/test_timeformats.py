"""Time formats in headers: Go durations (seconds), RFC 3339 and HTTP dates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from latscope.signals.timeformats import parse_go_duration, parse_http_date, parse_rfc3339, to_unix_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("12ms", 0.012),
        ("1h2m3.5s", 3723.5),
        ("500us", 0.0005),
        ("500µs", 0.0005),  # U+00B5 MICRO SIGN
        ("500μs", 0.0005),  # U+03BC GREEK SMALL LETTER MU
        ("250ns", 2.5e-7),
        ("0", 0.0),
        ("0s", 0.0),
        ("1.5h", 5400.0),
        (".5s", 0.5),
        ("-2m", -120.0),
        ("+3s", 3.0),
        ("2m30s500ms", 150.5),
    ],
)
def test_go_durations_in_seconds(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize("text", ["", "s", "1", "1.5", "1x", "1h-2m", "one second", "1 s", "-", "1S"])
def test_invalid_go_durations(text: str) -> None:
    assert parse_go_duration(text) is None


def test_rfc3339_with_zulu_offset_and_fraction() -> None:
    assert parse_rfc3339("2025-01-15T10:00:30.250Z") == datetime(2025, 1, 15, 10, 0, 30, 250000, tzinfo=UTC)
    assert parse_rfc3339("2025-01-15t10:00:30z") == datetime(2025, 1, 15, 10, 0, 30, tzinfo=UTC)
    assert parse_rfc3339("2025-01-15T11:00:30+01:00") == datetime(
        2025, 1, 15, 11, 0, 30, tzinfo=timezone(timedelta(hours=1))
    )


@pytest.mark.parametrize("text", ["2025-01-15T10:00:30", "2025-01-15", "tomorrow", "2025-13-45T10:00:00Z"])
def test_rfc3339_without_offset_or_invalid_is_none(text: str) -> None:
    assert parse_rfc3339(text) is None


@pytest.mark.parametrize(
    "text",
    ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"],
)
def test_all_three_http_date_forms(text: str) -> None:
    assert parse_http_date(text) == datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC)


def test_invalid_http_date_is_none() -> None:
    assert parse_http_date("soon") is None


def test_now_as_float_or_datetime() -> None:
    assert to_unix_seconds(1_700_000_000.5) == 1_700_000_000.5
    assert to_unix_seconds(datetime(1970, 1, 1, 0, 0, 10, tzinfo=UTC)) == 10.0
    assert to_unix_seconds(datetime(1970, 1, 1, 0, 0, 10)) == 10.0  # naive: taken as UTC
