"""How much of one response stream a decoder holds at most, and the error for a stream that needs more.

A stream decoder keeps only the incomplete line and the event being assembled; a server that never ends a line
(one 200 MiB ``data:`` line), or never ends an event (two million ``data:`` lines), would make it hold everything.
The limits bound that: past one, the decoder raises :class:`StreamLimitError` and the client ends the request with
a ``limit`` error, keeping the events before it. The defaults are far above any real token stream (a chunk with
logprobs or a tool call is kilobytes) and far below what would hurt a load generator running many streams.
"""

from __future__ import annotations

from typing import NamedTuple

#: The longest line (SSE or NDJSON) a decoder holds while waiting for its end, bytes.
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
#: The largest one SSE event may grow, bytes as sent (all its field lines): held as a list of its lines until it
#: ends, a short line costs far more in memory than its bytes.
DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


class StreamLimits(NamedTuple):
    """The limits of one stream decoder, bytes (see the module docstring)."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES


DEFAULT_LIMITS = StreamLimits()


class StreamLimitError(ValueError):
    """A stream exceeded one of its decoder's :class:`StreamLimits`. ``limit`` names it (``max_line_bytes``,
    ``max_event_bytes``); the message says how far into the stream (byte offset) it happened."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit
