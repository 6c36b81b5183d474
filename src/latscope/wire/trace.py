"""W3C Trace Context (https://www.w3.org/TR/trace-context/): a fresh ``traceparent`` for every request, so a server's
spans and logs can be joined with the client's timeline by trace id."""

from __future__ import annotations

import os

#: version 00, sampled flag set (trace-context §3.2.2.5) so servers that honour sampling record the request.
_VERSION = "00"
_FLAGS = "01"


def new_traceparent() -> tuple[str, str]:
    """``(traceparent header value, trace id)`` with random 16-byte trace id and 8-byte parent (span) id."""
    trace_id = os.urandom(16).hex()
    span_id = os.urandom(8).hex()
    return f"{_VERSION}-{trace_id}-{span_id}-{_FLAGS}", trace_id
