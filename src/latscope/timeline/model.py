"""The request timeline: everything latscope knows about one attempt of one HTTP request.

Time is ``int`` nanoseconds from :func:`time.monotonic_ns` (one clock for every mark, so differences are exact and
comparable with a server on the same machine that stamps with the same clock). Marks that did not happen are ``None``:
a reused connection has no DNS, connect or TLS marks; a request that failed in ``connect`` has no later marks.

Mark naming follows one scheme, ``<phase>_start_ns`` / ``<phase>_end_ns``, in request order::

    started_ns                      the caller asked for the request (pool wait starts here)
    dns_start_ns .. dns_end_ns      getaddrinfo (absent when the host is an IP literal or the connection is reused)
    connect_start_ns .. connect_end_ns   TCP three-way handshake
    tls_start_ns .. tls_end_ns      TLS handshake (absent over plain HTTP)
    connection_ready_ns             a connection is ready for this request (new or taken from the pool)
    send_start_ns .. send_end_ns    request headers and body written to the socket; ``headers_sent_ns`` in between
    first_byte_ns                   the first response byte was read (TTFB)
    headers_received_ns             the response status line and headers were parsed
    first_token_ns .. last_token_ns the read that carried the first / last token-bearing stream event (of any
                                    kind: visible text, reasoning or tool-call arguments); for a non-streamed
                                    response both are the read that completed the body (every token arrives with
                                    the whole body, so TTFT is the time to the whole answer)
    first_text_ns                   the read that carried the first visible-text token (``content``): after
                                    ``first_token_ns`` when the model reasons or calls a tool first
    ended_ns                        the response ended (or the request failed)

Over HTTP/3 (QUIC, :mod:`latscope.wire.h3`) the same marks hold with one difference: QUIC has no transport
handshake of its own, so ``connect`` is only the opening of the UDP socket (no packet, microseconds) and ``tls`` is
the whole QUIC handshake, which carries TLS 1.3 inside it. TCP's connect + tls compares with HTTP/3's tls.

Hot-path records: a :class:`Read` is a named tuple, one per socket read (tuple construction is several times cheaper
than a dataclass); stream events are kept as columns (:class:`EventLog`), read back as :class:`StreamEvent` tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, overload


class Phase(StrEnum):
    """Where on the request path something happened; errors name the phase that failed."""

    POOL = "pool"  #: waiting for a free connection in the client's pool
    DNS = "dns"  #: name resolution (getaddrinfo)
    CONNECT = "connect"  #: TCP connect
    TLS = "tls"  #: TLS handshake
    SEND = "send"  #: writing the request
    HEADERS = "headers"  #: waiting for / parsing the response status line and headers
    STREAM = "stream"  #: reading and decoding the response body


class ErrorKind(StrEnum):
    """Why a request attempt failed, as a short machine-readable cause (:attr:`RequestError.kind`); the
    :class:`Phase` says where. The values are stable: run directories and JSON files store them."""

    URL = "url"  #: the URL is not an http(s) URL, or its port is not a number
    DNS = "dns"  #: name resolution failed or returned no address
    REFUSED = "refused"  #: the TCP connection was refused
    UNREACHABLE = "unreachable"  #: no route to the network or host
    CONNECT = "connect"  #: the TCP connect failed otherwise
    TLS_CONFIG = "tls-config"  #: the client's TLS set-up failed (an unreadable CA file)
    CERT_VERIFY = "cert-verify"  #: the server's certificate did not verify
    TLS = "tls"  #: the TLS handshake or a TLS record failed
    CLOSED = "closed"  #: the server closed the connection (or the client was closed) before the response ended
    RESET = "reset"  #: the connection or the HTTP/2 stream was reset
    LOST = "lost"  #: the connection was lost for another reason
    TRUNCATED = "truncated"  #: the response body ended before its announced length or final chunk
    GOAWAY = "goaway"  #: an HTTP/2 GOAWAY ended the stream before the server processed it
    PROTOCOL = "protocol"  #: the server broke HTTP (an invalid response head, invalid HTTP/2 data)
    INVALID_REQUEST = "invalid-request"  #: the request itself could not be written (an invalid header)
    TIMEOUT = "timeout"  #: a phase's time limit, or the total one, ran out
    HTTP_STATUS = "http-status"  #: the server answered with an error status (4xx/5xx)
    CONTENT_TYPE = "content-type"  #: a streamed request was answered with something other than a stream
    API_ERROR = "api-error"  #: the stream or the body carried an error object instead of a result
    DECODE = "decode"  #: the stream could not be decoded (invalid JSON, invalid framing)
    EMPTY = "empty"  #: a 2xx stream ended without a single token (an empty body, or events with no token in them)
    ENCODING = "encoding"  #: the body came in a content encoding the client cannot decode
    LIMIT = "limit"  #: the response exceeded one of the client's limits (a line, an event, the body's size)
    CANCELLED = "cancelled"  #: the caller cancelled the request (a load step ended, Ctrl-C)
    #: the load worker that ran it died (a Ray actor or its node) before reporting it: its outcome is unknown
    WORKER_LOST = "worker-lost"
    INTERNAL = "internal"  #: a bug in latscope: the timeline keeps what was measured before it


class ServerPhase(StrEnum):
    """A phase of the server's own work on a request: the normalised names of :attr:`ServerMeasure.name` (a measure
    the server reports under a name of its own keeps that name). :mod:`latscope.signals` maps each server's headers,
    body fields and metrics onto these."""

    PARSE = "parse"  #: reading and parsing the request body
    VALIDATE = "validate"  #: validation and tokenising
    #: vLLM's spans: arrival in its API server → queued in its engine (input processing, and the engine step running
    #: when the request came, which the engine's own timestamps do not see)
    INGEST = "ingest"
    WINDOW_WAIT = "window_wait"  #: waiting for a batching window to close (counted inside ``queue`` too)
    QUEUE = "queue"  #: waiting for a batch slot
    LOAD = "load"  #: Ollama: scheduler wait and model load
    SLOT_WAIT_TEMPLATING = "slot_wait_templating"  #: Ollama: what its total leaves after load, prefill and decode
    PREFILL = "prefill"  #: prompt processing, up to the first token
    DECODE = "decode"  #: generation after the first token
    E2E = "e2e"  #: the whole request inside the server
    PROCESSING = "processing"  #: OpenAI's ``openai-processing-ms``
    UPSTREAM = "upstream"  #: a proxy's wait for its upstream (``x-envoy-upstream-service-time``)


#: The ``Timeline.server_fields`` key of vLLM's per-request ``metrics`` object (``--enable-per-request-metrics``), as
#: the OpenAI stream decoder keeps it from the final usage chunk and :mod:`latscope.signals.join` reads it.
VLLM_METRICS_FIELD = "vllm_metrics"

#: The fields of vLLM's per-request ``metrics`` object, any of which marks an object as one
#: (vllm/entrypoints/generate/base/serving.py, ``build_per_request_timing_metrics``).
VLLM_METRICS_KEYS = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms")

#: The server phases that come before the first token, in the order a request goes through them.
PHASES_BEFORE_FIRST_TOKEN: tuple[ServerPhase, ...] = (
    ServerPhase.PARSE,
    ServerPhase.VALIDATE,
    ServerPhase.INGEST,
    ServerPhase.WINDOW_WAIT,
    ServerPhase.QUEUE,
    ServerPhase.LOAD,
    ServerPhase.SLOT_WAIT_TEMPLATING,
    ServerPhase.PREFILL,
)


class EventKind(StrEnum):
    """What one decoded stream event carried (the dialect decides; one SSE event gives one stream event)."""

    ROLE = "role"  #: a role-only chunk (``delta.role`` with no text), usually the first
    CONTENT = "content"  #: visible token text (``delta.content`` / ``text``, Anthropic ``text_delta`` …)
    #: reasoning token text (``delta.reasoning_content`` / ``delta.reasoning``, Anthropic ``thinking_delta``,
    #: Responses ``response.reasoning*`` deltas, Ollama ``thinking``)
    REASONING = "reasoning"
    #: tool-call argument text (``delta.tool_calls[].function.arguments``, Anthropic ``input_json_delta``, Responses
    #: ``response.function_call_arguments.delta``): tokens the model generated, not shown to a user
    TOOL_CALL = "tool_call"
    FINISH = "finish"  #: a chunk carrying ``finish_reason`` and no text
    USAGE = "usage"  #: a usage-only chunk (``choices: []`` with ``usage``), possibly with ``timings``
    ERROR = "error"  #: an in-stream error object
    DONE = "done"  #: the ``[DONE]`` sentinel
    OTHER = "other"  #: anything else (comments are not events; unknown JSON shapes are)

    @property
    def carries_tokens(self) -> bool:
        """True for kinds whose events count as generated tokens (content, reasoning and tool-call arguments)."""
        return self in TOKEN_KINDS


TOKEN_KINDS = frozenset({EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL})
"""The kinds whose events are generated tokens: TTFT is measured to the first of any of them, ITL within each."""


class StampSource(StrEnum):
    """Where the stamp of a :class:`Read` came from."""

    #: ``time.monotonic_ns()`` when the event loop handed the bytes to the client: includes the client's own
    #: scheduling delay (the loop was busy with other sockets' callbacks)
    USER = "user"
    #: the kernel's software receive stamp (Linux ``SO_TIMESTAMPNS``), converted to the monotonic clock: when the
    #: network stack took the data in. For TCP it is the stamp of the *last* segment the read returned, so events read
    #: together (several events on one read) may have arrived earlier than it
    KERNEL = "kernel"


class Read(NamedTuple):
    """One socket read (after TLS decryption: the read that completed the TLS records it decrypted).

    ``at_ns`` is the read's best stamp, the one every mark and event uses: the kernel's receive stamp when the
    connection reads kernel stamps (``user_ns`` then holds the user-space stamp of the same read), else the
    user-space stamp (``user_ns`` None).
    """

    at_ns: int  #: monotonic ns when the bytes arrived (kernel stamp) or were handed to the client (user stamp)
    nbytes: int  #: bytes delivered by this read (decrypted application bytes, HTTP framing included)
    #: monotonic ns when the event loop handed this read to the client, for a kernel-stamped read; None when
    #: ``at_ns`` is itself that user-space stamp
    user_ns: int | None = None

    @property
    def source(self) -> StampSource:
        """Which clock stamped ``at_ns``."""
        return StampSource.USER if self.user_ns is None else StampSource.KERNEL


class StreamEvent(NamedTuple):
    """One decoded stream event (one SSE event / one NDJSON line).

    ``choice`` was added in schema 2 (:mod:`latscope.timeline.serialize`); records of schema 1 read as choice 0.
    """

    at_ns: int  #: monotonic ns of the read that completed this event
    read_index: int  #: index into ``Timeline.reads`` of that read
    kind: EventKind  #: what the event carried
    text_chars: int  #: characters of token text (0 when none)
    tokens: int  #: tokens this event carries (1 per token-bearing chunk unless the dialect knows better)
    server_sent_ns: int | None  #: the server's own send stamp when it reports one (lab ``--truth``), else None
    #: which of the request's choices (``n > 1``: OpenAI ``choices[].index``) or output items the event belongs to; 0
    #: for a single-answer stream
    choice: int = 0


_new_event = tuple.__new__


class EventLog(Sequence[StreamEvent]):
    """A timeline's stream events, kept as columns: one list per :class:`StreamEvent` field.

    A stream of tens of thousands of events would otherwise keep one named tuple per event alive, each tracked by the
    garbage collector (named tuples are never untracked, and an event holds an :class:`EventKind`), so every full
    collection walks them all: about a third of the client's CPU per event (``benchmarks/client_overhead.py``). The
    columns hold ints, ``None`` and the shared :class:`EventKind` members, which the collector does not track.

    It reads as a sequence of :class:`StreamEvent` (each made when asked for); the client appends a read's events
    to the columns directly (:meth:`columns`), and a table writer reads the columns without making any.
    """

    __slots__ = ("at_ns", "choice", "kind", "read_index", "server_sent_ns", "text_chars", "tokens")

    def __init__(self, events: Iterable[StreamEvent] = ()) -> None:
        self.at_ns: list[int] = []  #: monotonic ns of the read that completed each event
        self.read_index: list[int] = []  #: index into ``Timeline.reads`` of that read
        self.kind: list[EventKind] = []  #: what each event carried
        self.text_chars: list[int] = []  #: characters of token text (0 when none)
        self.tokens: list[int] = []  #: tokens each event carries
        self.server_sent_ns: list[int | None] = []  #: the server's own send stamp, None when it reports none
        self.choice: list[int] = []  #: the choice or output item each event belongs to
        for event in events:
            self.append(event)

    def columns(
        self,
    ) -> tuple[list[int], list[int], list[EventKind], list[int], list[int], list[int | None], list[int]]:
        """The columns in :class:`StreamEvent`'s field order, to append to in a hot loop (every one by one event)."""
        return (
            self.at_ns,
            self.read_index,
            self.kind,
            self.text_chars,
            self.tokens,
            self.server_sent_ns,
            self.choice,
        )

    def append(self, event: StreamEvent) -> None:
        """Add one event at the end."""
        at_ns, read_index, kind, text_chars, tokens, server_sent_ns, choice = event
        self.at_ns.append(at_ns)
        self.read_index.append(read_index)
        self.kind.append(kind)
        self.text_chars.append(text_chars)
        self.tokens.append(tokens)
        self.server_sent_ns.append(server_sent_ns)
        self.choice.append(choice)

    def extend(self, events: Iterable[StreamEvent]) -> None:
        """Add events at the end, in order."""
        for event in events:
            self.append(event)

    def clear(self) -> None:
        """Drop every event."""
        for column in self.columns():
            column.clear()

    def __len__(self) -> int:
        return len(self.at_ns)

    @overload
    def __getitem__(self, index: int) -> StreamEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[StreamEvent]: ...

    def __getitem__(self, index: int | slice) -> StreamEvent | list[StreamEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _new_event(StreamEvent, tuple(column[index] for column in self.columns()))

    def __iter__(self) -> Iterator[StreamEvent]:
        for row in zip(*self.columns(), strict=True):
            yield _new_event(StreamEvent, row)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EventLog):
            return self.columns() == other.columns()
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"EventLog({list(self)!r})"

    def __reduce__(self) -> tuple[type[EventLog], tuple[list[StreamEvent]]]:
        return (EventLog, (list(self),))


def as_event_log(events: Iterable[StreamEvent]) -> EventLog:
    """``events`` as an :class:`EventLog`: itself when it is one (a timeline's events assigned a list read alike)."""
    return events if isinstance(events, EventLog) else EventLog(events)


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """A ``TCP_INFO`` snapshot of the connection's socket (Linux ``struct tcp_info``). Times in microseconds.

    The last four fields came later (records written before them read as None).
    """

    rtt_us: int  #: smoothed round-trip time
    rttvar_us: int  #: round-trip time variance
    min_rtt_us: int | None  #: lowest RTT seen (kernel ≥ 4.6), None when the kernel does not report it
    total_retrans: int  #: segments retransmitted over the connection's life
    snd_cwnd: int  #: congestion window, in segments
    ato_us: int  #: delayed-ACK timeout the kernel currently uses (40 000 µs = Linux's minimum)
    #: the largest segment the peer sends, bytes, as this side estimates it (``tcpi_rcv_mss``): a read of exactly
    #: this many bytes is one full segment
    rcv_mss: int | None = None
    #: the kernel's latest estimate of the rate this side's data was delivered at, bytes/s (``tcpi_delivery_rate``,
    #: kernel ≥ 4.9); after an upload, what the path carried it at
    delivery_rate_bps: int | None = None
    #: segments sent and not yet acknowledged (``tcpi_unacked``): 0 once the peer has everything sent so far
    unacked: int | None = None
    #: the largest segment this side sends, bytes (``tcpi_snd_mss``): the path's segment size, which the peer's
    #: sends share on a symmetric path even while ``rcv_mss`` still sits at its 536-byte start (it grows only when
    #: a segment that large arrives, which a stream of small events never sends)
    snd_mss: int | None = None

    @property
    def segment_bytes(self) -> int | None:
        """The largest segment the peer can send on this connection, bytes: the larger of the largest this side has
        received (``rcv_mss``) and this side's own send MSS (``snd_mss``). ``rcv_mss`` alone stays at the kernel's
        536-byte start until a segment that large arrives, which a server writing small events with TCP_NODELAY
        never sends; this side's send MSS is the path's, and the peer's on a symmetric path. None when neither is
        known."""
        sizes = [size for size in (self.rcv_mss, self.snd_mss) if size]
        return max(sizes) if sizes else None


#: The fields of :class:`ConnectionInfo` a report shows about a target (:meth:`ConnectionInfo.facts`), in order.
CONNECTION_FACTS = ("http_version", "alpn", "tls_version", "remote_address", "remote_port")


@dataclass(slots=True)
class ConnectionInfo:
    """Facts about the connection that carried the request."""

    connection_id: int  #: pool-unique id: requests with the same id shared one connection
    reused: bool  #: True when the connection was taken from the pool (no DNS/connect/TLS for this request)
    requests_before: int = 0  #: how many requests this connection carried before this one
    local_address: str | None = None
    local_port: int | None = None
    remote_address: str | None = None
    remote_port: int | None = None
    http_version: str | None = None  #: "HTTP/1.1", "HTTP/1.0", "HTTP/2" or "HTTP/3"
    alpn: str | None = None  #: ALPN protocol the TLS server selected ("h2", "http/1.1"), None without TLS/ALPN
    tls_version: str | None = None  #: e.g. "TLSv1.3"
    tls_cipher: str | None = None
    tls_session_resumed: bool | None = None  #: None without TLS; True when an offered session was accepted
    tls_session_offered: bool | None = None  #: True when the client offered a saved session for resumption
    tcp_info_at_headers: TcpInfo | None = None  #: TCP_INFO when the response headers arrived
    tcp_info_at_end: TcpInfo | None = None  #: TCP_INFO when the response ended
    quickack: bool = False  #: True when the client set TCP_QUICKACK before every read
    delayed_ack: bool = False  #: True when the client held the connection in delayed-ACK mode (TCP_QUICKACK 0)
    #: where this connection's read stamps come from: ``kernel`` when the client read the socket itself with kernel
    #: receive stamps (:class:`StampSource`), ``user`` otherwise, including where kernel stamps were asked for and the
    #: platform or kernel refused them (``kernel_stamps_refused`` then says so)
    stamps: str = "user"
    kernel_stamps_refused: bool = False  #: True when kernel stamps were asked for and could not be had

    @property
    def rtt_us(self) -> int | None:
        """The round-trip time the kernel measured, µs: ``min_rtt`` when it reports one, else the smoothed RTT, at
        the response head (else at the end); None without TCP_INFO or when it reads 0."""
        tcp = self.tcp_info_at_headers or self.tcp_info_at_end
        if tcp is None:
            return None
        return tcp.min_rtt_us or tcp.rtt_us or None

    def facts(self) -> dict[str, object]:
        """What a report says about the connection: HTTP version, ALPN, TLS version, the server's address."""
        return {name: getattr(self, name) for name in CONNECTION_FACTS}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage as the server reported it (OpenAI ``usage`` object)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None  #: ``prompt_tokens_details.cached_tokens`` when present
    reasoning_tokens: int | None = None  #: ``completion_tokens_details.reasoning_tokens`` when present


@dataclass(frozen=True, slots=True)
class ServerMeasure:
    """One duration the server reported about this request, with where it came from.

    ``name`` is a :class:`ServerPhase` when one applies (``parse``, ``validate``, ``queue``, ``prefill``, ``decode``,
    ``e2e``, ``processing``, ``upstream`` …) or the server's own name otherwise; ``source`` says which header, body
    field or metric it was read from (e.g. ``"header:server-timing:queue"``, ``"body:timings.prompt_ms"``).
    """

    name: str
    ms: float  #: the duration, converted to milliseconds whatever unit the server used
    source: str


@dataclass(frozen=True, slots=True)
class RequestError:
    """Why a request attempt failed, and where."""

    phase: Phase  #: the phase that failed
    kind: ErrorKind  #: a short machine-readable cause, e.g. "refused", "dns", "cert-verify", "reset", "http-status"
    message: str  #: human-readable cause, e.g. "TLS handshake failed: certificate verify failed"
    at_ns: int  #: monotonic ns when the failure was detected
    status: int | None = None  #: HTTP status for HTTP-level errors


@dataclass(frozen=True, slots=True)
class Attempt:
    """An earlier attempt of a logical request that a caller sent again (``--retries``): what it got and how long
    the caller waited before the next one. The attempt that ended the logical request is the :class:`Timeline`
    itself; these are the ones before it, in :attr:`Timeline.retries`.
    """

    number: int  #: 1 for the first attempt, 2 for the first retry …
    started_ns: int  #: monotonic ns the attempt started (its ``Timeline.started_ns``)
    ended_ns: int  #: monotonic ns it ended (failed, or was answered with a status worth retrying)
    status: int | None  #: the HTTP status it got, None when no response head came
    error: RequestError | None  #: why it failed (a 429 is an ``http-status`` error)
    #: token-bearing stream events it delivered before it failed (always 0 without an idempotency key: a stream
    #: that delivered tokens is not sent again without one)
    tokens: int
    retry_after_ms: float | None  #: the wait the server asked for (``retry-after-ms``, else ``Retry-After``), ms
    should_retry: bool | None  #: the server's ``x-should-retry``, when it sent one
    wait_ns: int  #: what the caller waited after it before the next attempt started (backoff, or Retry-After)
    response_id: str | None = None  #: the id its stream named (:attr:`Timeline.response_id`), None without one


@dataclass(slots=True)
class Timeline:
    """One request attempt, from the caller's ask to the last byte. See the module docstring for the marks.

    The client fills it while the request runs; everything derived (milliseconds, ITL, TPOT) lives in
    :mod:`latscope.timeline.metrics` so the record itself stays plain data.
    """

    method: str = "POST"
    url: str = ""  #: the request URL with secrets in the query string redacted
    dialect: str | None = None  #: e.g. "openai.chat", "openai.completions"
    model: str | None = None
    #: the generation limit the request asked for (its dialect's ``max_tokens``, ``max_new_tokens`` …), None when it
    #: left it to the server or the request was built by hand
    max_tokens: int | None = None
    stream: bool | None = None  #: the request asked for a streamed response
    request_headers: dict[str, str] = field(default_factory=dict)  #: as sent, secrets redacted
    request_body_bytes: int = 0
    label: str | None = None  #: free text from the caller (experiment name, workload class)
    trace_id: str | None = None  #: W3C trace id sent in ``traceparent``, when one was sent
    #: the parent-id (16 hex digits) of the ``traceparent`` latscope generated for this request: the request's own
    #: span id, so its exported span (:mod:`latscope.export`) is the parent of the server's; None when latscope sent
    #: none, or the caller set the ``traceparent`` itself (its parent-id is then the caller's span)
    span_id: str | None = None

    scheduled_ns: int | None = None  #: when a load generator meant to send it (client queue = started − scheduled)
    started_ns: int = 0
    dns_start_ns: int | None = None
    dns_end_ns: int | None = None
    connect_start_ns: int | None = None
    connect_end_ns: int | None = None
    tls_start_ns: int | None = None
    tls_end_ns: int | None = None
    connection_ready_ns: int | None = None
    send_start_ns: int | None = None
    headers_sent_ns: int | None = None
    send_end_ns: int | None = None
    first_byte_ns: int | None = None
    headers_received_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    first_text_ns: int | None = None
    ended_ns: int | None = None

    connection: ConnectionInfo | None = None
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)  #: lower-case names; repeated ones joined ", "
    #: the trailer section (HTTP/2 trailers, or the trailer of a chunked HTTP/1.1 body), named like the headers;
    #: where servers put what they know only at the end (a Server-Timing with the whole generation's phases)
    response_trailers: dict[str, str] = field(default_factory=dict)
    response_body_bytes: int = 0  #: body bytes after HTTP framing was removed

    reads: list[Read] = field(default_factory=list)
    #: the stream's events, as columns (:class:`EventLog`); a list given here or assigned later is read the same way
    events: EventLog = field(default_factory=EventLog)
    finish_reason: str | None = None
    usage: Usage | None = None
    output_text: str | None = None  #: the generated text, when the caller asked to keep it
    server: list[ServerMeasure] = field(default_factory=list)
    server_fields: dict[str, object] = field(default_factory=dict)  #: raw server timing objects (``timings`` …)
    #: the stream's tokens were counted from the token ids the server listed with each event (vLLM's
    #: ``return_token_ids``), not one per text event; :func:`~latscope.timeline.metrics.token_count_source` says
    #: which count the metrics use
    tokens_from_ids: bool = False
    error: RequestError | None = None
    warnings: list[str] = field(default_factory=list)  #: non-fatal oddities (no ``[DONE]``, unknown event shapes)
    #: the error of a first attempt that went to a kept-alive connection the server had already closed (it failed
    #: before any byte of a response arrived); the request was sent once more on a new connection, and this timeline
    #: records that attempt (RFC 9112 §9.3.1)
    stale_retry_error: RequestError | None = None
    #: the earlier attempts of the same logical request, oldest first, when the caller retried it
    #: (:mod:`latscope.wire.retry`); empty when this is the first and only attempt
    retries: list[Attempt] = field(default_factory=list)
    #: the ``Idempotency-Key`` the caller sent with every attempt of the logical request, None without one
    idempotency_key: str | None = None
    #: the response's own id as its stream names it first (OpenAI's chunk ``id``, Anthropic's message id, the
    #: Responses API's response id; see :mod:`latscope.wire.exchange`), None when the stream names none: a server
    #: that replays a stored answer sends the same id again, one that generates anew a new one
    response_id: str | None = None
    #: the trace ids the response body names in its first bytes, when the request sent a ``traceparent``
    #: (:func:`latscope.wire.exchange.body_trace_ids`: the sent one first when the body contains it, then any other
    #: in a ``traceparent``-shaped value or a ``trace_id`` member); empty when it names none or none was sent
    body_trace_ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.events, EventLog):
            self.events = EventLog(self.events)

    @property
    def attempt(self) -> int:
        """This attempt's number within its logical request: 1 + the earlier attempts."""
        return len(self.retries) + 1

    @property
    def logical_started_ns(self) -> int:
        """When the logical request started: its first attempt's start (this one's without retries)."""
        return self.retries[0].started_ns if self.retries else self.started_ns

    @property
    def ok(self) -> bool:
        """True when the request completed without error."""
        return self.error is None and self.ended_ns is not None

    def phase_reached(self) -> Phase:
        """The latest phase the marks show the request entered: where an error with no phase of its own (a
        cancellation, a bug, a deadline) is charged."""
        latest_first = (
            (self.status, Phase.STREAM),  # a response head arrived
            (self.send_end_ns, Phase.HEADERS),
            (self.connection_ready_ns, Phase.SEND),
            (self.tls_start_ns, Phase.TLS),
            (self.connect_start_ns, Phase.CONNECT),
            (self.dns_start_ns, Phase.DNS),
        )
        return next((phase for mark, phase in latest_first if mark is not None), Phase.POOL)

    def server_ms(self, name: str) -> float | None:
        """The first server-reported duration called ``name``, in ms, or None."""
        for measure in self.server:
            if measure.name == name:
                return measure.ms
        return None
