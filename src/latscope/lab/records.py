"""Per-request ground truth: what the lab did and injected for each request it answered.

In-process callers read :attr:`latscope.lab.Lab.records` (a bounded deque, newest last) to compare a diagnosis's
measured costs with the injected ones: connection reuse (``index_on_connection``), TLS resumption, gateway parse
and validate time, queue and prefill time, how many events went out in how many writes.

Every request that reaches the lab's routes leaves a record, whatever its status. Requests the HTTP layer refuses
before they are complete (malformed, head or body too large, too slow) leave none: they never became requests.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

#: Records kept in memory: enough for a diagnose run or a bench sweep, bounded so a long-running lab stays small.
DEFAULT_RECORDS_MAX = 10_000


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One answered (or abandoned) request. Times are monotonic ns; durations are ms; None = did not apply."""

    method: str
    path: str
    status: int  #: HTTP status sent (499 when the client went away before the response head)
    request_id: str | None  #: ``x-request-id`` of generation requests
    endpoint: str | None  #: "chat.completions" or "completions" for generation requests
    stream: bool
    # -- connection (edge stage) --
    connection_id: int  #: 1-based, in accept order
    index_on_connection: int  #: 1 = first request on its connection; > 1 = the client reused it
    http_version: str  #: "1.1", "1.0", "2" or "3"
    tls_version: str | None
    tls_resumed: bool  #: the TLS handshake of this request's connection resumed a session
    alpn: str | None
    nodelay: bool  #: TCP_NODELAY on the connection (False under the ``nagle`` fault)
    faults: frozenset[str]
    # -- timeline --
    body_bytes: int  #: request body size
    started_ns: int  #: first byte of the request read
    received_ns: int  #: last byte of the request read
    headers_sent_ns: int | None  #: response head written
    finished_ns: int  #: response complete, or the moment it was abandoned
    # -- gateway and engine --
    parse_ms: float | None
    validate_ms: float | None
    queue_ms: float | None  #: includes ``window_wait_ms``
    window_wait_ms: float | None
    prefill_ms: float | None
    decode_ms: float | None
    ttft_ms: float | None  #: first token ready − request received (server side)
    prompt_tokens: int | None
    completion_tokens: int  #: tokens sent to the client
    preemptions: int
    # -- stream writer --
    events_written: int  #: SSE events produced (role, tokens, finish, usage, [DONE])
    write_calls: int  #: body writes to the transport (fewer than events when buffered)
    cancelled: bool  #: the client went away before the response was complete
    error: str | None  #: the error message sent, or why the response was cut short
    #: the W3C ``traceparent`` header the request carried, as received (None without one): lets a test check that a
    #: client's exported spans and the trace context on the wire agree
    traceparent: str | None = None
    #: how long the gateway's rate limiter held the request before the scheduler (queue mode), ms; 0 when it let it
    #: through at once, None without a limiter's decision (no limiter, or the request never got that far)
    gateway_wait_ms: float | None = None
    #: the wait the rate limiter's 429 asked for (its ``retry-after-ms``), ms; None when it did not refuse
    retry_after_ms: float | None = None
    #: the ``Idempotency-Key`` the request carried (a client's retry key, not a credential), None without one
    idempotency_key: str | None = None
    #: what the gateway did with the key (:mod:`latscope.lab.idempotency`): ``executed`` (it claimed the key and
    #: ran), ``replayed`` (it got the stored answer, nothing generated), ``in-use`` (409), ``reused`` (422),
    #: ``unavailable`` (503: the store was unreachable, nothing ran), ``ignored`` (the ``no-idempotency`` fault: it
    #: ran whatever the key); None without a key, or when the request was refused before the key was looked at
    idempotency: str | None = None
    #: what the key cost before the request ran or replayed: the store's claim or lookup, and a duplicate's wait for
    #: the original, ms; None when the key was not looked at
    idempotency_ms: float | None = None
    #: what the gateway's circuit breaker did with the request: ``refused`` (open: 503, never reached the engine),
    #: ``probe`` (half-open: the request that tried the upstream again); None when it let it through closed, or is off
    circuit: str | None = None
    #: bytes of the images the request carried (OpenAI chat ``image_url`` parts, decoded from base64), 0 for none
    image_bytes: int = 0
    #: what the gateway spent on those images, ms: decoding them and preprocessing them; None without images
    preprocess_ms: float | None = None


def new_record_log(maxlen: int = DEFAULT_RECORDS_MAX) -> collections.deque[RequestRecord]:
    """An empty, bounded record log."""
    return collections.deque(maxlen=maxlen)
