"""Time formats servers use in headers: Go durations, RFC 3339 timestamps and HTTP dates. Results in seconds.

Every function returns ``None`` for a value it cannot read; the caller decides whether that deserves a warning.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# Go's time.ParseDuration grammar: [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+ ("1h2m3.5s"), or a bare "0".
# Units as Go accepts them; "µs" (U+00B5) and "μs" (U+03BC) are both microseconds (src/time/format.go, unitMap).
_GO_UNIT_SECONDS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_GO_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float | None:
    """A Go duration string (``1s``, ``6m0s``, ``12ms``, ``1h2m3.5s``, ``500us``) in seconds, or None.

    OpenAI sends ``x-ratelimit-reset-*`` in this format (Go's ``time.Duration.String()``).
    """
    s = text.strip()
    sign = 1.0
    if s[:1] in ("+", "-"):
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        return None
    total = 0.0
    pos = 0
    while pos < len(s):
        match = _GO_TERM.match(s, pos)
        if match is None:
            return None
        total += float(match.group(1)) * _GO_UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return sign * total


# RFC 3339 §5.6 date-time: full-date "T" full-time, where full-time requires an offset ("Z" or ±hh:mm).
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$",
)


def parse_rfc3339(text: str) -> datetime | None:
    """An RFC 3339 timestamp (``2024-06-21T19:20:36Z``) as an aware datetime, or None.

    Fractions beyond microseconds are truncated (Python's datetime resolution).
    """
    s = text.strip()
    if not _RFC3339.match(s):
        return None
    s = s.upper()
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_http_date(text: str) -> datetime | None:
    """An HTTP-date (RFC 9110 §5.6.7: IMF-fixdate, obsolete RFC 850 and asctime forms) as an aware UTC datetime."""
    try:
        parsed = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    # HTTP dates are always GMT (RFC 9110 §5.6.7); asctime has no zone, so parsedate returns a naive value.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def parse_finite_float(text: str) -> float | None:
    """A plain decimal number (``1``, ``0.25``, ``-3``) as a finite float, or None (no ``inf``/``nan``)."""
    s = text.strip()
    if not _DECIMAL.fullmatch(s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def parse_nonnegative_int(text: str) -> int | None:
    """A non-negative decimal integer (``0``, ``42``), or None."""
    s = text.strip()
    return int(s) if s.isascii() and s.isdigit() else None


def to_unix_seconds(now: datetime | float) -> float:
    """``now`` as Unix seconds: a float is taken as Unix seconds already; a naive datetime is taken as UTC."""
    if isinstance(now, datetime):
        return (now if now.tzinfo is not None else now.replace(tzinfo=UTC)).timestamp()
    return float(now)
