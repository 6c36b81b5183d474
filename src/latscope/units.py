"""The units latscope converts between, defined once.

Time is ``int`` nanoseconds from :func:`time.monotonic_ns` inside latscope and milliseconds (``float``) at the
user-facing edge; sizes are bytes, and "MB" in a report means MiB (2**20 bytes), as HTTP body limits are set.

This module imports nothing, so every layer may use it — the lab too, which otherwise shares no code with the client.
"""

from __future__ import annotations

NS_PER_MS = 1_000_000
"""Nanoseconds per millisecond: ``(end_ns - start_ns) / NS_PER_MS`` is a duration in ms."""

NS_PER_S = 1_000_000_000
"""Nanoseconds per second."""

BYTES_PER_MB = 1024 * 1024
"""Bytes per MB (MiB) in request-body sizes and per-MB costs."""
