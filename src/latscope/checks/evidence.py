"""What the experiments measured, in the form the checks read: plain numbers, no sockets, no timelines.

Each experiment family fills one evidence class; a check is a pure function of it (plus the :class:`Reference`, the
typical request's cost that severities are measured against). Hand-built evidence is how the checks are unit-tested.

All durations are milliseconds (float), sizes bytes, and a value that was not measured is ``None``. One request
becomes one :class:`RequestSample` (see :meth:`RequestSample.from_timeline`, the only place that reads a
:class:`~latscope.timeline.model.Timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

from latscope.signals.cache import CacheSignal
from latscope.signals.ratelimit import RateLimitState
from latscope.signals.traceresponse import ReturnedTraceId
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


@dataclass(frozen=True, slots=True)
class ConnectionEvidence:
    """The connection experiment.

    Fields:
        tls: the target is https.
        sequential: three (or more) requests one after another on one client pool, in order.
        fresh: requests forced onto new connections (``new_connection``), each offered the saved TLS session.
        offered_alpn: the ALPN protocols the client offered (empty without TLS).
        concurrency: the HTTP/1.1-under-concurrency measurement (None when not run: plain HTTP, or h2 negotiated).
        idle: ``(pause_s, sample)``: a request sent on the same pool after the pool sat idle ``pause_s`` seconds (a
            user reading an answer): does the connection survive the pause?
        host: the target's host as its URL names it (a DNS name, or an IP literal); empty when not recorded.
        host_is_ip: ``host`` is an IPv4 or IPv6 address, so no connection resolves a name (no dns phase).

    Every new connection among ``sequential``, ``idle`` and ``fresh`` resolved ``host`` by itself (its ``dns_ms``,
    next to its own ``connect_ms``): these lookups, in that order, are the ``slow-dns`` evidence.
    """

    tls: bool
    sequential: tuple[RequestSample, ...]
    fresh: tuple[RequestSample, ...] = ()
    offered_alpn: tuple[str, ...] = ()
    concurrency: ConcurrencyEvidence | None = None
    idle: tuple[tuple[float, RequestSample], ...] = ()
    host: str = ""
    host_is_ip: bool = False


@dataclass(frozen=True, slots=True)
class ConcurrencyEvidence:
    """Bursts of requests sent at once through a pool of ``connections_per_origin`` HTTP/1.1 connections (what a
    browser does: 6 per host): ``rounds`` holds each burst's samples in send order."""

    connections_per_origin: int
    rounds: tuple[tuple[RequestSample, ...], ...]

    @property
    def samples(self) -> tuple[RequestSample, ...]:
        """Every request of every burst."""
        return tuple(s for burst in self.rounds for s in burst)


@dataclass(frozen=True, slots=True)
class ParsePoint:
    """One padded request of the parsing experiment: its body size (bytes) and the server-side time (``wait_ms``:
    first response byte − request fully written), the upload time, what the server reported for parsing and
    validating (ms, None when it reports nothing), and whether it went on a reused connection (None: unknown)."""

    body_bytes: int
    server_ms: float
    send_ms: float | None = None
    server_parse_ms: float | None = None
    reused: bool | None = None


@dataclass(frozen=True, slots=True)
class ParsingEvidence:
    """The parsing experiment.

    Fields:
        padding: how bodies were padded: ``"user"`` (OpenAI's ``user`` string, never tokenised), ``"whitespace"``
            (JSON whitespace) or None when the server accepted neither.
        points: every padded request that completed.
        control: the same bodies made invalid at their first byte, which the server must receive whole and then
            rejects at once (400): their ``server_ms`` is the cost of receiving a body (network, TLS, HTTP framing)
            without parsing it. Empty when the server answered them in an unusable way.
        fast_parser: ``(body_bytes, ms)``: ``orjson.loads`` of the same bodies in the client process, best of a few.
        failures: padded requests and controls that failed (samples with their errors).
        probe_failures: the first padded requests that found out whether the server accepts a padding kind and
            failed: a refusal there chose the other kind (or showed that neither is accepted).
        rejected: why padding was refused (the server's answer), when it was.
        size_limit_bytes: the largest body the server accepted when it refused a larger one (413), else None.
        rtt_ms: the connection's TCP round-trip time (a remote target adds upload transfer time to ``server_ms``).
        upload_rate_bps: the rate the path carried the largest bodies at (bytes/s, the kernel's estimate).
    """

    padding: str | None
    points: tuple[ParsePoint, ...] = ()
    control: tuple[ParsePoint, ...] = ()
    fast_parser: tuple[tuple[int, float], ...] = ()
    failures: tuple[RequestSample, ...] = ()
    rejected: str | None = None
    size_limit_bytes: int | None = None
    rtt_ms: float | None = None
    probe_failures: tuple[RequestSample, ...] = ()
    upload_rate_bps: float | None = None


@dataclass(frozen=True, slots=True)
class QueueEvidence:
    """The queueing experiment. TTFTs are ``ttft_after_setup_ms`` (the client's connection setup excluded).

    Fields:
        short_prompt_tokens / long_prompt_tokens: prompt sizes used (about; the server adds its template).
        longs_per_round: long requests in flight while each short one is sent.
        short_alone_ms: short TTFTs with nothing else in flight.
        long_alone_ms: long TTFTs with nothing else in flight (their prefill, plus the short's fixed costs).
        short_contended_ms: short TTFTs sent while ``longs_per_round`` long requests were in flight.
        server_queue_ms: what the server reported as queue time for the contended short requests (may be empty).
        long_contended_ms: per round, the TTFTs of its long requests (how the server worked through them).
        failures: requests that failed, but for the long prompts sent alone.
        long_alone_failures: long prompts sent alone (sizing the long prompt, and its repeats) that failed; a
            refusal among them (``RequestSample.refused``: a context too short) is the sizing at work.
        head_start_ms: per contended round (aligned with ``short_contended_ms``; empty when unknown), how long the
            first long request had been inside the server when the short one arrived: the client's lead after it saw
            the long one acknowledged, plus one round trip.
        rounds_not_arrived: rounds left out because their long requests had not all reached the server in time.
        arrival_verified: every counted round saw its long requests acknowledged (False where the platform could
            only see them written).
        note: how the long prompt was sized (halved after a rejection, capped …).
    """

    short_prompt_tokens: int
    long_prompt_tokens: int
    longs_per_round: int
    short_alone_ms: tuple[float, ...] = ()
    long_alone_ms: tuple[float, ...] = ()
    short_contended_ms: tuple[float, ...] = ()
    server_queue_ms: tuple[float, ...] = ()
    failures: tuple[RequestSample, ...] = ()
    note: str | None = None
    long_contended_ms: tuple[tuple[float, ...], ...] = ()
    long_alone_failures: tuple[RequestSample, ...] = ()
    head_start_ms: tuple[float, ...] = ()
    rounds_not_arrived: int = 0
    arrival_verified: bool = True

    @property
    def all_failures(self) -> tuple[RequestSample, ...]:
        """Every failed request of the experiment."""
        return self.long_alone_failures + self.failures


@dataclass(frozen=True, slots=True)
class StreamEvidence:
    """The streaming experiment: the same request (``max_tokens`` tokens) under several ACK conditions, and the
    same prompt with ``max_tokens`` 1 for the buffering comparison.

    Conditions (each a tuple of samples; empty when not run):
        fresh: new connections, the kernel's default ACK behaviour.
        reused: one client pool after a warm-up request (reused connections when the server keeps them alive).
        delayed_ack: new connections put into delayed-ACK mode (TCP_QUICKACK 0) before the request, the ACK state
            every reused keep-alive connection is in; available on Linux only (``delayed_ack_supported``).
        quickack: the client ACKs every read at once (TCP_QUICKACK 1 before each read), one pool after a warm-up:
            the control, with Nagle's wait for an ACK removed.
        quickack_short: quickack, ``max_tokens`` 1: TTFT when there is nothing to hold back.
        quickack_fresh: quickack on new connections, sent alternately with ``delayed_ack``: its control. A
            connection's first request pays for things its later ones do not (the server's first read of the
            connection, an HTTP/2 preface and settings, TLS session tickets), several ms on a busy host.
        quickack_http11 / quickack_short_http11: the same two on a client that offers only HTTP/1.1, when the
            target negotiated HTTP/2 (a proxy may buffer one protocol and not the other); empty otherwise.
    """

    max_tokens: int
    fresh: tuple[RequestSample, ...] = ()
    reused: tuple[RequestSample, ...] = ()
    delayed_ack: tuple[RequestSample, ...] = ()
    quickack: tuple[RequestSample, ...] = ()
    quickack_short: tuple[RequestSample, ...] = ()
    quickack_fresh: tuple[RequestSample, ...] = ()
    quickack_http11: tuple[RequestSample, ...] = ()
    quickack_short_http11: tuple[RequestSample, ...] = ()
    delayed_ack_supported: bool = True
    quickack_supported: bool = True


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One prompt of the baseline sweep: its size (about, in tokens) and TTFT without connection setup (ms)."""

    prompt_tokens: int
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class BaselineEvidence:
    """The baseline: a prompt-length sweep (``max_tokens`` 1) and the typical request (``typical``: a few
    sequential streamed requests of ``typical_max_tokens`` tokens on one fresh client, the first one cold)."""

    sweep: tuple[SweepPoint, ...] = ()
    typical: tuple[RequestSample, ...] = ()
    typical_prompt_tokens: int = 0
    typical_max_tokens: int = 0
    failures: tuple[RequestSample, ...] = ()
    max_prompt_tokens_accepted: int | None = None


@dataclass(frozen=True, slots=True)
class PairPoint:
    """Two short requests sent ``offset_ms`` apart on two connections with nothing else in flight, and the gap
    between their first tokens (ms, second − first; negative when the second came first)."""

    offset_ms: float
    first_token_gap_ms: float


@dataclass(frozen=True, slots=True)
class BatchingEvidence:
    """The batching experiment. TTFTs are ``ttft_after_setup_ms`` (the client's connection setup excluded).

    Fields:
        prompt_tokens: the short prompt's size (about).
        alone_ms: short TTFTs with nothing else in flight.
        pairs: staggered pairs, in the order sent (offsets are fractions of the idle TTFT beyond the round trip).
        rtt_ms: the connections' TCP round-trip time (None where not reported).
        failures: requests that failed.
    """

    prompt_tokens: int
    alone_ms: tuple[float, ...] = ()
    pairs: tuple[PairPoint, ...] = ()
    rtt_ms: float | None = None
    failures: tuple[RequestSample, ...] = ()


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """One prompt of the prefill sweep: its size (tokens, as the server counted them where it said, else as sent)
    and TTFT without connection setup (ms)."""

    prompt_tokens: int
    ttft_ms: float


@dataclass(frozen=True, slots=True)
class PrefillEvidence:
    """The prefill experiment: TTFT against prompt length, the baseline's sweep extended towards the server's
    context limit (``max_tokens`` 1).

    Fields:
        points: every prompt that completed (the baseline's sweep points included).
        refused_at: the smallest prompt (tokens) the server refused for its length, None when none was.
        budget_stopped_at: the first size not sent because its predicted TTFT was over the experiment's budget.
        failures: prompts that failed other than by a refusal.
    """

    points: tuple[PrefillPoint, ...] = ()
    refused_at: int | None = None
    budget_stopped_at: int | None = None
    failures: tuple[RequestSample, ...] = ()


@dataclass(frozen=True, slots=True)
class SaturationLevel:
    """One step of the concurrency sweep: ``concurrency`` short requests sent at once, in each of a few rounds.

    ``first_token_lags_ms`` (aligned with ``rounds``; empty when not known) gives of each request the ms from the
    earliest first token of the others in its burst to its own (None where either is missing): a request that
    waited for a slot got its first token about a whole stream after the first ones of its burst. ``set_aside``
    holds the rounds the experiment sent again because the server was busy before they began
    (:func:`latscope.checks.saturation.busy_at_start`): kept for the record, not judged.
    """

    concurrency: int
    rounds: tuple[tuple[RequestSample, ...], ...]
    first_token_lags_ms: tuple[tuple[float | None, ...], ...] = ()
    set_aside: tuple[tuple[RequestSample, ...], ...] = ()

    @property
    def samples(self) -> tuple[RequestSample, ...]:
        """Every request of every round."""
        return tuple(s for burst in self.rounds for s in burst)

    @property
    def ttfts_ms(self) -> list[float]:
        """TTFTs without connection setup of the requests that completed, every round."""
        return [s.ttft_after_setup_ms for s in self.samples if s.ok and s.ttft_after_setup_ms is not None]

    @property
    def failed(self) -> list[RequestSample]:
        """The requests that failed."""
        return [s for s in self.samples if not s.ok]


@dataclass(frozen=True, slots=True)
class SaturationEvidence:
    """The saturation experiment: a bounded concurrency sweep of short prompts (every level's connections opened
    before it is measured).

    Fields:
        prompt_tokens / max_tokens: each request's prompt (about) and tokens generated.
        levels: the steps, in increasing concurrency; the sweep stops one step after requests started to wait.
        waiting_gauge / running_gauge: the server's waiting- and running-requests gauges at their highest during
            the sweep, where its metrics had them (None: not read).
        metrics: which metrics were read (the server family), or why none were.
        batch_series: the server's running-requests gauge over the sweep (its batch size), ``(seconds since the
            sweep began, running, waiting)`` per scrape (waiting None where the server has no such gauge).
        level_starts: ``(concurrency, seconds since the sweep began)`` of each level.
    """

    prompt_tokens: int
    max_tokens: int
    levels: tuple[SaturationLevel, ...] = ()
    waiting_gauge: float | None = None
    running_gauge: float | None = None
    metrics: str | None = None
    batch_series: tuple[tuple[float, float, float | None], ...] = ()
    level_starts: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class KvEvidence:
    """The KV-cache experiment: long streams alone, then many at once.

    Fields:
        prompt_tokens / max_tokens / concurrency: each stream's prompt (about) and length, and the burst's size.
        alone: the same streams one at a time (the control: how a stream flows without pressure).
        burst: ``concurrency`` of them sent at once.
        preemptions: the server's preemption counter's increase over the burst (None: not read).
        kv_usage_max: the server's KV-cache usage gauge (0–1) at its highest during the burst (None: not read).
        metrics: which metrics were read (the server family), or why none were.
        skipped: why the burst was not sent (the target too slow for a bounded burst), None when it was.
    """

    prompt_tokens: int
    max_tokens: int
    concurrency: int
    alone: tuple[RequestSample, ...] = ()
    burst: tuple[RequestSample, ...] = ()
    preemptions: float | None = None
    kv_usage_max: float | None = None
    metrics: str | None = None
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class SamplingEvidence:
    """The sampling experiment: the same short prompt and length decoded greedily and with sampling parameters,
    alternately on one connection.

    Fields:
        max_tokens: tokens each stream generates.
        greedy: the greedy streams (``temperature`` 0).
        sampled: the streams that asked for top-p, penalties and logprobs (``parameters``).
        parameters: the sampling parameters the server accepted (names), empty when it refused every set tried.
        refused: what the server answered to sampling parameters it refused, when it did.
    """

    max_tokens: int
    greedy: tuple[RequestSample, ...] = ()
    sampled: tuple[RequestSample, ...] = ()
    parameters: tuple[str, ...] = ()
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class TraceContextEvidence:
    """The trace-context experiment: one request carrying a fresh W3C ``traceparent``.

    Fields:
        sample: the request (None when none was sent).
        sent_trace_id: the trace id of the ``traceparent`` it carried, 32 hex digits (None when it carried none).
        returned: the trace ids the response named (``traceresponse``, Server-Timing, id headers containing the
            sent id; see :mod:`latscope.signals.traceresponse`).
    """

    sample: RequestSample | None = None
    sent_trace_id: str | None = None
    returned: tuple[ReturnedTraceId, ...] = ()


@dataclass(frozen=True, slots=True)
class CachedReply:
    """One request of the caching experiment with what its response said about caching.

    Fields:
        sample: the request.
        cache: the response's cache headers (``Age``, ``X-Cache``, ``CF-Cache-Status``, ``Cache-Status`` …).
        output_sha256: hex digest of the generated text (None when it generated none or failed).
    """

    sample: RequestSample
    cache: CacheSignal = field(default_factory=CacheSignal)
    output_sha256: str | None = None


@dataclass(frozen=True, slots=True)
class CachingEvidence:
    """The caching experiment: a request, a varied one of the same size (the control), then the first again, byte
    for byte, on one connection.

    Fields:
        first: the first request. control: the varied one. repeat: the first one's exact repeat.
    """

    first: CachedReply | None = None
    control: CachedReply | None = None
    repeat: CachedReply | None = None


@dataclass(frozen=True, slots=True)
class HeaderPoint:
    """One request of the header-size sweep: ``pad_bytes`` of harmless padding headers added to the client's own."""

    pad_bytes: int
    sample: RequestSample


@dataclass(frozen=True, slots=True)
class HeaderEvidence:
    """The header-size sweep: the same short request with growing padding headers (``X-Latscope-Pad-N``), each size
    on a new connection and then on a reused one, the client's own headers (credentials included) unchanged.

    Fields:
        own_header_bytes: size of the client's own request headers, bytes (``name: value`` plus CRLF each; the
            values are never kept).
        points: the requests on reused connections, in the order sent, the first without padding (the control).
        refused_at_bytes: the padding at which the server refused the request (431, 400, 494, or closed the
            connection) on either kind of connection, None when it accepted every size; the sweep stops there.
        refused: what the server answered then.
        fresh: the same sizes, each on a new connection (``new_connection``), in the order sent, the first without
            padding: a head past TCP's initial congestion window (RFC 6928: ten segments, about 14 KB) waits for the
            first acknowledgements there, a round trip more at a distance, so this sweep's time per KB can exceed
            the reused one's. Empty when not run.
    """

    own_header_bytes: int
    points: tuple[HeaderPoint, ...] = ()
    refused_at_bytes: int | None = None
    refused: str | None = None
    fresh: tuple[HeaderPoint, ...] = ()


@dataclass(frozen=True, slots=True)
class ImagePair:
    """One size of the image experiment, sent twice: the short prompt with an image part of ``image_bytes`` (the
    image file's size; its ``data:`` URI is a third longer), and the control, the same prompt carrying the very same
    URI text where the model never reads it (same body bytes, no image)."""

    image_bytes: int
    image: RequestSample
    text: RequestSample


@dataclass(frozen=True, slots=True)
class MultimodalEvidence:
    """The image experiment: the same short prompt with an image part of growing size, each next to a control of
    the same bytes as text.

    Fields:
        dialect: the dialect of the run.
        supported: the dialect carries image parts (OpenAI chat ``image_url``); when False nothing was sent.
        control: how the control carries the bytes: ``"user"`` (OpenAI's ``user`` string, never tokenised) or
            ``"whitespace"`` (JSON whitespace), None when no control was accepted.
        probe: a small image sent first: does the server accept image parts at all? (None when nothing was sent.)
        pairs: every size's image and control, in the order sent; failed requests included (their samples say why).
    """

    dialect: str
    supported: bool = True
    control: str | None = None
    probe: RequestSample | None = None
    pairs: tuple[ImagePair, ...] = ()


@dataclass(frozen=True, slots=True)
class RateLimitAnswer:
    """One response that carried rate-limit information, as the run saw it.

    Fields:
        experiment: the experiment that sent the request (``ratelimit`` for the probe itself).
        label: what the experiment sent it for.
        status: the HTTP status (429, a 503 with ``Retry-After``, or a success that reported its quota).
        state: every rate-limit header of the response, parsed (:func:`latscope.signals.ratelimit.rate_limit_state`;
            times in seconds from the response's arrival).
    """

    experiment: str
    label: str
    status: int | None
    state: RateLimitState

    @property
    def refused(self) -> bool:
        """The server refused the request for its rate: 429, or 503 with ``Retry-After`` (RFC 9110 §15.6.4)."""
        return self.status == 429 or (self.status == 503 and self.state.retry_after_s is not None)

    @property
    def wait_ms(self) -> float | None:
        """The wait the refusal imposes, ms: ``Retry-After`` (``retry-after-ms`` first), else the soonest reset of an
        exhausted window; None when the server said neither."""
        if self.state.retry_after_s is not None:
            return self.state.retry_after_s * 1000.0
        resets = [w.reset_s for w in self.state.exhausted if w.reset_s is not None]
        return min(resets) * 1000.0 if resets else None


@dataclass(frozen=True, slots=True)
class RateLimitEvidence:
    """The rate-limit probe, with what every other experiment of the run met.

    Fields:
        probe_limit: the most requests the probe would send (it stops at the first refusal).
        probe: the probe's requests in order: short prompts, one token each, sent back to back on one connection.
        refusals: every rate-limit refusal of the run (:attr:`RateLimitAnswer.refused`), from any experiment, the
            probe's included, in order.
        quota: the last answered request's rate-limit headers (None when no answer carried any).
    """

    probe_limit: int
    probe: tuple[RequestSample, ...] = ()
    refusals: tuple[RateLimitAnswer, ...] = ()
    quota: RateLimitAnswer | None = None


@dataclass(frozen=True, slots=True)
class GatewayQueueEvidence:
    """The offered-rate step: the same short requests at a low rate, then as many at once.

    Fields:
        low_interval_ms: the low rate's spacing between sends (ms).
        low: the low-rate requests (the control), in send order.
        high: the requests sent at once, in send order.
        high_request_ids: the server's ``x-request-id`` of the ``high`` requests that carried one (lets a test find
            them in a server's own records).
    """

    low_interval_ms: float
    low: tuple[RequestSample, ...] = ()
    high: tuple[RequestSample, ...] = ()
    high_request_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GatewayOverheadEvidence:
    """The paired comparison of the target (a gateway) with its upstream reached directly (``--direct``).

    Fields:
        gateway_url: the target's base URL.
        direct_url: the upstream's base URL, None when ``--direct`` was not given (nothing was sent).
        gateway_address / direct_address: ``"address:port"`` each path's connection reached (None when unknown):
            two URLs that reach the same listener are one server, and their difference is noise.
        warmup: the first request on each path, ``(gateway, direct)``, not compared (each opens its path's
            connection); None when the experiment sent none.
        pairs: ``(gateway, direct)`` samples of requests of one shape (the same prompt length and ``max_tokens``,
            each with a prompt of its own), sent one after the other on kept-alive connections, in send order; the
            first pair sends the gateway's request first, the next the direct one, and so on alternately.
    """

    gateway_url: str
    direct_url: str | None = None
    gateway_address: str | None = None
    direct_address: str | None = None
    warmup: tuple[RequestSample, RequestSample] | None = None
    pairs: tuple[tuple[RequestSample, RequestSample], ...] = ()
