"""Requests as the checks see them: one request (:class:`RequestSample`) and the run's typical request
(:class:`Reference`), the types every check family reads.

Each experiment family fills one evidence class, kept beside its check (``StreamEvidence`` in
:mod:`latscope.checks.streaming`, ``ParsingEvidence`` in :mod:`latscope.checks.parsing` …); a check is a pure
function of it (plus the :class:`Reference`, the typical request's cost that severities are measured against).
Hand-built evidence is how the checks are unit-tested.

All durations are milliseconds (float), sizes bytes, and a value that was not measured is ``None``. One request
becomes one :class:`RequestSample` (see :meth:`RequestSample.from_timeline`, the only place that reads a
:class:`~latscope.timeline.model.Timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from latscope.timeline import metrics
from latscope.timeline.model import TOKEN_KINDS, ErrorKind, EventKind, ServerPhase, Timeline
from latscope.units import NS_PER_MS

#: A read of less than this share of the server's segment size carried a partial segment (a full one, less the
#: TLS record and HTTP/2 frame overhead it may carry, stays above it).
PARTIAL_SEGMENT_SHARE = 0.8

#: Server-reported phases kept on a sample (Server-Timing, llama.cpp ``timings``, the lab's object), by name.
SERVER_PHASES: tuple[ServerPhase, ...] = tuple(ServerPhase)


@dataclass(frozen=True, slots=True)
class RequestSample:
    """One request as the checks see it. Durations in ms (None: the phase did not happen or the request failed
    before it); see :mod:`latscope.timeline.metrics` for each definition.

    Fields beyond the phase durations:
        label: what the experiment sent it for ("reuse 2/3", "pad 1.0 MB", …).
        error_kind / error_phase / error_message / status: why it failed (``error_kind`` None when it did not).
        reused: the connection came from the pool; connection_id: the pool's connection id.
        tls_offered / tls_resumed: a saved TLS session was offered / accepted (None without TLS).
        ttft_after_setup_ms: first token − connection ready: TTFT without the client's connection setup.
        e2e_after_setup_ms: end − connection ready.
        request_bytes: request body size; response_close: the response said ``Connection: close``.
        rtt_ms: TCP round-trip time from TCP_INFO (``min_rtt`` when reported, else the smoothed RTT).
        delivery_rate_bps: the kernel's estimate of the rate the request was delivered at (bytes/s, TCP_INFO at the
            end of the response), None where not reported.
        segment_bytes: the largest segment the server can send on the connection, bytes (:attr:`TcpInfo.segment_bytes
            <latscope.timeline.model.TcpInfo.segment_bytes>`), None where TCP_INFO is not reported.
        body_bytes: response body bytes (HTTP framing removed).
        first_read_token_events: token events completed by the read that carried the first token.
        max_token_events_per_read: most token events one read completed (1 = no coalescing).
        burst_bytes: sizes of the reads that completed two or more token events, in order.
        token_read_events: token events each read completed, for the reads that completed any, in order.
        partial_read_gaps_ms: gaps between consecutive reads from the first token on that carried less than
            :data:`PARTIAL_SEGMENT_SHARE` of a segment (``segment_bytes``); empty without a segment size. Nagle's
            algorithm lets one partial segment be unacknowledged at a time, so with it on these gaps are a round trip
            or more.
        itl_ms: every inter-token gap.
        token_at_ms: when each token event arrived, ms on the client's monotonic clock (one clock for every request
            of a run, so streams sent together can be laid side by side), in arrival order.
        output_tokens: tokens the server generated (``usage``) or the events carried.
        prompt_tokens: prompt tokens as the server counted them (``usage``), None where it did not say.
        cached_tokens: of those, the ones it took from its prefix cache (``prompt_tokens_details.cached_tokens``,
            Anthropic's ``cache_read_input_tokens``), None where it did not say.
        x_accel_buffering: the response's ``X-Accel-Buffering`` header (None when absent).
        server_ms: server-reported phases by name (subset of :data:`SERVER_PHASES`).
        events: stream events the response carried, of any kind (0 for a stream that ended empty).
        error_events: in-stream error objects among them.
        stale_retry: the request first went to a kept-alive connection that the server had closed without saying
            so, and failed before any response byte; this sample is its one retry on a new connection.
    """

    label: str
    error_kind: ErrorKind | None = None
    error_phase: str | None = None
    error_message: str | None = None
    status: int | None = None
    reused: bool | None = None
    connection_id: int | None = None
    http_version: str | None = None
    alpn: str | None = None
    tls_version: str | None = None
    tls_offered: bool | None = None
    tls_resumed: bool | None = None
    dns_ms: float | None = None
    connect_ms: float | None = None
    tls_ms: float | None = None
    pool_ms: float | None = None
    send_ms: float | None = None
    wait_ms: float | None = None
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    ttft_after_setup_ms: float | None = None
    e2e_after_setup_ms: float | None = None
    request_bytes: int = 0
    response_close: bool = False
    server_header: str | None = None
    rtt_ms: float | None = None
    delivery_rate_bps: int | None = None
    segment_bytes: int | None = None
    body_bytes: int = 0
    first_read_token_events: int = 0
    max_token_events_per_read: int = 0
    burst_bytes: tuple[int, ...] = ()
    token_read_events: tuple[int, ...] = ()
    partial_read_gaps_ms: tuple[float, ...] = ()
    itl_ms: tuple[float, ...] = ()
    token_at_ms: tuple[float, ...] = ()
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    x_accel_buffering: str | None = None
    server_ms: dict[ServerPhase, float] = field(default_factory=dict)
    events: int = 0
    error_events: int = 0
    stale_retry: bool = False

    @property
    def ok(self) -> bool:
        """True when the request completed without error."""
        return self.error_kind is None

    @property
    def refused(self) -> bool:
        """The server turned this request down as such (not overloaded, not broken): a 4xx other than 429, or a
        2xx stream that carried no token and either no event at all or an in-stream error.

        The second form is how servers that start streaming before they look at the prompt refuse one: llama-cpp-
        python answers a prompt longer than its context with ``200 OK`` and an empty chunked body when the request
        asks for a stream (``400 context_length_exceeded`` only without ``stream``); others send an error object
        as the stream's only event.
        """
        status = self.status
        if status is None:
            return False
        if 400 <= status < 500:
            return status != 429
        if not 200 <= status < 300 or self.output_tokens or self.ttft_ms is not None:
            return False
        if self.error_kind is ErrorKind.API_ERROR or self.error_events:
            return True
        return self.error_kind == ErrorKind.EMPTY and self.events == 0

    @property
    def setup_paid_ms(self) -> float | None:
        """dns + connect + tls this request paid for its connection (None when it reused one or has no marks)."""
        parts = [v for v in (self.dns_ms, self.connect_ms, self.tls_ms) if v is not None]
        return sum(parts) if parts else None

    @classmethod
    def from_timeline(cls, t: Timeline, label: str | None = None) -> RequestSample:
        """The sample of one recorded request."""
        info = t.connection
        err = t.error
        first_read = None
        token_reads: dict[int, int] = {}
        for event in t.events:
            if event.kind in TOKEN_KINDS:
                if first_read is None:
                    first_read = event.read_index
                token_reads[event.read_index] = token_reads.get(event.read_index, 0) + 1
        bursts = tuple(
            t.reads[index].nbytes
            for index, count in sorted(token_reads.items())
            if count >= 2 and 0 <= index < len(t.reads)
        )
        rtt_us = None if info is None else info.rtt_us
        end_tcp = None if info is None else info.tcp_info_at_end
        mss = None if end_tcp is None else end_tcp.segment_bytes
        rtt_ms = None if rtt_us is None else rtt_us / 1000.0
        ready = t.connection_ready_ns
        ttft_after = None
        e2e_after = None
        if ready is not None:
            if t.first_token_ns is not None:
                ttft_after = (t.first_token_ns - ready) / NS_PER_MS
            if t.ended_ns is not None and err is None:
                e2e_after = (t.ended_ns - ready) / NS_PER_MS
        server: dict[ServerPhase, float] = {}
        for measure in t.server:
            if measure.name in SERVER_PHASES and measure.name not in server:
                server[ServerPhase(measure.name)] = measure.ms
        headers = t.response_headers
        return cls(
            label=label if label is not None else (t.label or ""),
            error_kind=err.kind if err is not None else None,
            error_phase=str(err.phase) if err is not None else None,
            error_message=err.message if err is not None else None,
            status=t.status,
            reused=info.reused if info is not None else None,
            connection_id=info.connection_id if info is not None else None,
            http_version=info.http_version if info is not None else None,
            alpn=info.alpn if info is not None else None,
            tls_version=info.tls_version if info is not None else None,
            tls_offered=info.tls_session_offered if info is not None else None,
            tls_resumed=info.tls_session_resumed if info is not None else None,
            dns_ms=metrics.dns_ms(t),
            connect_ms=metrics.connect_ms(t),
            tls_ms=metrics.tls_ms(t),
            pool_ms=metrics.pool_ms(t),
            send_ms=metrics.send_ms(t),
            wait_ms=metrics.wait_ms(t),
            ttfb_ms=metrics.ttfb_ms(t),
            ttft_ms=metrics.ttft_ms(t),
            e2e_ms=metrics.e2e_ms(t) if err is None else None,
            ttft_after_setup_ms=ttft_after,
            e2e_after_setup_ms=e2e_after,
            request_bytes=t.request_body_bytes,
            response_close="close" in headers.get("connection", "").lower(),
            server_header=headers.get("server"),
            rtt_ms=rtt_ms,
            delivery_rate_bps=None if end_tcp is None else end_tcp.delivery_rate_bps,
            segment_bytes=mss,
            body_bytes=t.response_body_bytes,
            first_read_token_events=token_reads.get(first_read, 0) if first_read is not None else 0,
            max_token_events_per_read=max(token_reads.values(), default=0),
            burst_bytes=bursts,
            token_read_events=tuple(count for _, count in sorted(token_reads.items())),
            partial_read_gaps_ms=_partial_read_gaps(t, first_read, mss),
            itl_ms=tuple(metrics.itl_ms(t)),
            token_at_ms=tuple(e.at_ns / NS_PER_MS for e in t.events if e.kind in TOKEN_KINDS),
            output_tokens=metrics.output_tokens(t),
            prompt_tokens=None if t.usage is None else t.usage.prompt_tokens,
            cached_tokens=None if t.usage is None else t.usage.cached_tokens,
            x_accel_buffering=headers.get("x-accel-buffering"),
            server_ms=server,
            events=len(t.events),
            error_events=sum(1 for e in t.events if e.kind is EventKind.ERROR),
            stale_retry=t.stale_retry_error is not None,
        )


def _partial_read_gaps(t: Timeline, first_read: int | None, mss: int | None) -> tuple[float, ...]:
    """Gaps (ms) between consecutive reads, from the one with the first token on, smaller than
    :data:`PARTIAL_SEGMENT_SHARE` × ``mss`` bytes."""
    if first_read is None or not mss:
        return ()
    limit = PARTIAL_SEGMENT_SHARE * mss
    stamps = [r.at_ns for r in t.reads[first_read:] if r.nbytes < limit]
    return tuple((b - a) / NS_PER_MS for a, b in pairwise(stamps))


@dataclass(frozen=True, slots=True)
class Reference:
    """The typical request of this run, which severities are measured against: its median TTFT and end-to-end
    time (ms), and the decode cadence (median inter-token gap, ms; None when unknown)."""

    ttft_ms: float
    e2e_ms: float
    itl_ms: float | None = None
