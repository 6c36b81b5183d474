"""What every SSE-framed stream decoder shares, whatever the API: the SSE parser it feeds, the warnings about the
bytes themselves (:mod:`latscope.dialects.ssewarnings`) and the end of the body, where a subclass adds its own
message when the terminal event it expected never came (:meth:`SSEStreamDecoder.missing_end`)."""

from __future__ import annotations

from latscope.dialects.base import Chunk
from latscope.dialects.ssewarnings import closing_warnings, utf8_warnings
from latscope.sse.limits import DEFAULT_LIMITS, StreamLimits
from latscope.sse.parser import SSEParser


class SSEStreamDecoder:
    """The base of the SSE-framed :class:`~latscope.dialects.base.StreamDecoder` classes (a subclass adds ``feed``)."""

    __slots__ = ("_closed", "_sse", "_utf8_seen", "_warnings")

    def __init__(self, *, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        self._sse = SSEParser(limits)
        self._warnings: list[str] = []
        self._utf8_seen = 0  # invalid UTF-8 offsets already looked at
        self._closed = False

    @property
    def warnings(self) -> list[str]:
        """Non-fatal oddities seen so far: invalid UTF-8, unknown shapes, no terminal event, a truncated last event."""
        return self._warnings

    @property
    def sse(self) -> SSEParser:
        """The underlying SSE parser (event and comment counts, byte offsets)."""
        return self._sse

    def missing_end(self) -> str | None:
        """At close: the warning that the stream's terminal event never came, None when it did."""
        return None

    def close(self) -> list[Chunk]:
        """The body ended: add the end-of-stream warnings (a missing terminal event, a truncated event). Returns no
        chunk."""
        if self._closed:
            return []
        self._closed = True
        self._sse.close()
        self._report_invalid_utf8()
        self._warnings.extend(closing_warnings(self._sse))
        missing = self.missing_end()
        if missing is not None:
            self._warnings.append(missing)
        return []

    def _report_invalid_utf8(self) -> None:
        self._warnings.extend(utf8_warnings(self._sse, self._utf8_seen))
        self._utf8_seen = len(self._sse.invalid_utf8_offsets)
