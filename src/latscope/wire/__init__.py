"""The measuring client, the only client code that touches sockets.

DNS, TCP connect and TLS are timed separately (TLS through ``SSLContext.wrap_bio`` so saved sessions can be offered),
HTTP framing is done by h11 and h2, every socket read is stamped in ``data_received`` before anything else (or,
with ``Client(stamps="kernel")``, carries the kernel's receive stamp beside its user-space one:
:mod:`latscope.wire.rawsock`), and each decoded stream event is recorded with the stamp of the read that completed
it. See :class:`Client`; :func:`request_with_retries` sends a logical request again under a :class:`RetryPolicy`
(backoff with full jitter, Retry-After honoured, idempotency keys).
"""

from latscope.wire.client import Client
from latscope.wire.errors import (
    ConnectError,
    DNSError,
    ModelListError,
    PoolError,
    ResponseError,
    SendError,
    StreamError,
    TLSError,
    WireError,
    check,
)
from latscope.wire.loop import new_event_loop, run
from latscope.wire.models import Limits, Origin, OriginStats, Response, Timeouts
from latscope.wire.retry import RetryPolicy, request_with_retries

__all__ = [
    "Client",
    "ConnectError",
    "DNSError",
    "Limits",
    "ModelListError",
    "Origin",
    "OriginStats",
    "PoolError",
    "Response",
    "ResponseError",
    "RetryPolicy",
    "SendError",
    "StreamError",
    "TLSError",
    "Timeouts",
    "WireError",
    "check",
    "new_event_loop",
    "request_with_retries",
    "run",
]
