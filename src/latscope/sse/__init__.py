"""Server-Sent Events: an incremental, sans-IO parser (WHATWG HTML §9.2.6)."""

from latscope.sse.parser import SSEEvent, SSEParser

__all__ = ["SSEEvent", "SSEParser"]
