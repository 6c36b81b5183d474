"""Hand-built evidence for the check tests: samples with only the fields a check reads."""

from __future__ import annotations

from typing import Any

from latscope.checks.samples import Reference, RequestSample

#: A typical request: 10 ms to the first token, 200 ms end to end, 12 ms between tokens.
REF = Reference(ttft_ms=10.0, e2e_ms=200.0, itl_ms=12.0)


def ok(label: str = "req", **fields: Any) -> RequestSample:
    """A completed request with the given fields."""
    return RequestSample(label=label, **fields)


def failed(
    label: str = "req",
    *,
    status: int | None = 429,
    kind: str = "http-status",
    phase: str = "headers",
    message: str = "HTTP 429: slow down",
) -> RequestSample:
    """A failed request (429 by default)."""
    return RequestSample(label=label, error_kind=kind, error_phase=phase, error_message=message, status=status)


def reset(label: str = "req") -> RequestSample:
    """A request whose stream was reset mid-way."""
    return failed(label, status=200, kind="reset", phase="stream", message="connection reset by peer while reading")
