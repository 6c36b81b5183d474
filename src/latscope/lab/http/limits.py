"""Per-connection limits: the slowloris protections and the sizes the lab accepts."""

from __future__ import annotations

from dataclasses import dataclass

#: Body limit: diagnose's slow-request-parsing experiment pads bodies up to a few MB, so 16 MiB leaves room.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: Header limit: the request-header-bloat experiment sends headers above 8 KB; 64 KiB accepts those and still
#: bounds what a client can make the lab buffer before a request is complete.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
#: A client gets this long to send a complete request head (and, later, between two body reads). nginx's
#: ``client_header_timeout`` is 60 s; 10 s frees a slowloris connection sooner and is still generous on loopback.
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Idle keep-alive: a connection without a request in flight stays open this long. Comfortably longer than the
#: gaps a client leaves between requests (nginx's ``keepalive_timeout`` default is 75 s), so the tuned lab never
#: drops a connection a client would reuse.
DEFAULT_KEEPALIVE_TIMEOUT_S = 75.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Timeouts (seconds) and sizes (bytes) enforced on every connection."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S  #: to receive a request head; also the longest body-read gap
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S  #: idle time between requests before closing
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES  #: request line + headers (HTTP/2: header list size)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  #: larger bodies get 413
