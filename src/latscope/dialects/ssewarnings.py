"""The warnings every SSE-framed stream decoder adds about the bytes themselves, whatever the API: invalid UTF-8
(replaced by U+FFFD) and a body that ended inside an event. Each decoder adds its own end-of-stream message (the
terminal event it expected) after these."""

from __future__ import annotations

from latscope.sse.parser import SSEParser

MAX_UTF8_WARNINGS = 10
"""Invalid UTF-8 sequences reported one by one; past this many only a total is added at close (a broken server can
send millions, and each warning is kept in the timeline)."""


def utf8_warnings(parser: SSEParser, seen: int) -> list[str]:
    """A warning for each invalid UTF-8 sequence the parser met after the first ``seen``, up to
    :data:`MAX_UTF8_WARNINGS` in all."""
    offsets = parser.invalid_utf8_offsets
    return [f"invalid UTF-8 at stream byte {offset} (replaced by U+FFFD)" for offset in offsets[seen:MAX_UTF8_WARNINGS]]


def closing_warnings(parser: SSEParser) -> list[str]:
    """At the end of the body: the total of invalid UTF-8 sequences when there were more than were reported one by
    one, and a body that ended inside an unfinished event."""
    warnings = []
    total_invalid = len(parser.invalid_utf8_offsets)
    if total_invalid > MAX_UTF8_WARNINGS:
        warnings.append(f"{total_invalid} invalid UTF-8 sequences in all (replaced by U+FFFD)")
    if parser.ended_mid_event:
        warnings.append(f"stream ended inside an unfinished event ({parser.discarded_bytes} bytes discarded)")
    return warnings
