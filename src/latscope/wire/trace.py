"""W3C Trace Context (https://www.w3.org/TR/trace-context/): a fresh ``traceparent`` for every request, so a server's
spans and logs can be joined with the client's timeline by trace id."""

from __future__ import annotations

import os

#: version 00, sampled flag set (trace-context §3.2.2.5) so servers that honour sampling record the request.
_VERSION = "00"
_FLAGS = "01"

#: ids drawn from the OS per ``os.urandom`` call: one system call per request cost more than the rest of the header
#: work, so random bytes are drawn for many requests at once and handed out in order.
_IDS_PER_DRAW = 128
_ID_HEX = 48  # hex digits per request: a 16-byte trace id, then an 8-byte parent (span) id

_random_hex = ""
_next = 0


def new_traceparent() -> tuple[str, str, str]:
    """``(traceparent header value, trace id, parent id)`` with random 16-byte trace id and 8-byte parent (span) id
    (the parent id is the request's own span: see :attr:`~latscope.timeline.model.Timeline.span_id`)."""
    global _random_hex, _next
    pos = _next
    if pos >= len(_random_hex):
        _random_hex = os.urandom(_IDS_PER_DRAW * _ID_HEX // 2).hex()
        pos = 0
    _next = pos + _ID_HEX
    trace_id = _random_hex[pos : pos + 32]
    span_id = _random_hex[pos + 32 : pos + _ID_HEX]
    return f"{_VERSION}-{trace_id}-{span_id}-{_FLAGS}", trace_id, span_id


def _forget_drawn() -> None:
    """In a forked child: ids drawn by the parent would repeat the parent's, so draw afresh."""
    global _random_hex, _next
    _random_hex = ""
    _next = 0


if hasattr(os, "register_at_fork"):  # not on Windows, which never forks
    os.register_at_fork(after_in_child=_forget_drawn)
