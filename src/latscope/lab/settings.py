"""Everything a lab is configured with, in one frozen value shared by the Python API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from latscope.lab.breaker import BreakerConfig
from latscope.lab.costmodel import CostModel
from latscope.lab.faults import (
    BATCHING_TRIGGER,
    BATCHING_WINDOW,
    BATCHING_WINDOW_MS,
    DROP_TRACE_CONTEXT,
    FEW_SLOTS,
    FEW_SLOTS_MAX_BATCH,
    GATEWAY_CHUNK_MS,
    GATEWAY_HOP_MS,
    GATEWAY_OVERHEAD,
    GATEWAY_QUEUE,
    GATEWAY_QUEUE_BURST,
    GATEWAY_QUEUE_MAX_WAIT_S,
    GATEWAY_QUEUE_REQUESTS_PER_MIN,
    HEADER_SCAN,
    HEADER_SCAN_MS_PER_KB,
    NAGLE,
    NAIVE_ATTENTION,
    NAIVE_ATTENTION_FACTOR,
    NO_H2,
    NO_IDEMPOTENCY,
    NO_KEEPALIVE,
    PROXY_BUFFER_BYTES,
    PROXY_BUFFERING,
    QUEUE_HOL,
    RATE_LIMIT,
    RATE_LIMIT_REQUESTS_PER_MIN,
    RESPONSE_CACHE,
    SHORT_KEEPALIVE,
    SHORT_KEEPALIVE_TIMEOUT_S,
    SILENT_RESPONSE_CACHE,
    SLOW_IMAGE_MS_PER_MB,
    SLOW_IMAGE_PREPROCESSING,
    SLOW_PARSE,
    SLOW_SAMPLING,
    SLOW_SAMPLING_MS,
    SMALL_KV_CACHE,
    SMALL_KV_CACHE_BLOCKS,
    TLS_NO_TICKETS,
    resolve_faults,
)
from latscope.lab.http.limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEPALIVE_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    ConnectionLimits,
)
from latscope.lab.idempotency import DEFAULT_TTL_S, DEFAULT_WAIT_S
from latscope.lab.images import DEFAULT_MS_PER_MB
from latscope.lab.ratelimit import LimitMode, RateLimitConfig
from latscope.lab.records import DEFAULT_RECORDS_MAX
from latscope.lab.scheduler import Policy, SchedulerConfig

MetricsNames = Literal["lab", "vllm"]
DEFAULT_MODEL = "lab-model"


@dataclass(frozen=True, kw_only=True)
class LabSettings:
    """A lab's configuration. Faults come from ``profile`` plus ``faults`` minus ``no_faults``.

    Explicit scheduler settings (``policy``, ``batch_window_ms``, ``batch_trigger``) win over what a fault implies:
    ``queue-hol`` means FIFO unless ``policy`` says otherwise; ``batching-window`` means a 50 ms window with a
    trigger of 8 unless the window or the trigger is given.
    """

    profile: str = "tuned"
    faults: tuple[str, ...] = ()
    no_faults: tuple[str, ...] = ()
    host: str = "127.0.0.1"  #: loopback by default: the lab is a test server, not a public one
    port: int = 0  #: 0 binds an ephemeral port
    #: bind with SO_REUSEPORT, so several lab processes serve one port (``latscope lab --replicas``)
    reuse_port: bool = False
    tls: bool = False  #: serve HTTPS with a self-signed certificate generated on start
    http2: bool = True  #: offer HTTP/2 (ALPN h2 over TLS, prior knowledge over cleartext) unless ``no-h2``
    #: also serve HTTP/3 over UDP on the same port number (needs ``tls`` and aioquic), announced on the TCP
    #: responses with ``Alt-Svc: h3=":PORT"``
    http3: bool = False
    truth: bool = False  #: stamp every stream event with the lab's send time (``latscope.sent_ns``)
    api_key: str | None = None  #: require ``Authorization: Bearer KEY`` on /v1 routes
    model: str = DEFAULT_MODEL
    metrics_names: MetricsNames = "lab"
    cost: CostModel = field(default_factory=CostModel.default)
    policy: Policy | None = None
    batch_window_ms: float | None = None
    batch_trigger: int | None = None
    seed: int = 0  #: base seed of generated token text
    batch_log: Path | None = None  #: append the engine's batch records to this JSON-lines file
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    records_max: int = DEFAULT_RECORDS_MAX
    #: the gateway's rate limiter per API key (:mod:`latscope.lab.ratelimit`): requests and tokens (prompt +
    #: max_tokens) per minute, None for no limit; explicit values win over what ``rate-limit`` / ``gateway-queue``
    #: imply
    rate_limit_mode: LimitMode | None = None
    rate_limit_requests_per_min: int | None = None
    rate_limit_tokens_per_min: int | None = None
    rate_limit_burst: int | None = None  #: the requests bucket's size; None: a whole minute's quota
    rate_limit_max_wait_s: float | None = None  #: queue mode: the longest wait before a 429 instead
    #: where the gateway keeps ``Idempotency-Key`` claims and answers (:mod:`latscope.lab.idempotency`): ``memory``
    #: (this process) or a Redis URL shared by replicas (``redis://host:port/db``)
    idempotency_store: str = "memory"
    idempotency_ttl_s: float = DEFAULT_TTL_S  #: how long an answer is replayed, s
    idempotency_wait_s: float = DEFAULT_WAIT_S  #: how long a duplicate waits for the running original (then 409), s
    #: a converting gateway hop in front (:mod:`latscope.lab.hop`): ms per request and per streamed chunk; either
    #: set (0 included) puts the hop in front, explicit values win over what ``gateway-overhead`` implies
    gateway_hop_ms: float | None = None
    gateway_chunk_ms: float | None = None
    #: the gateway's circuit breaker in front of the engine (:mod:`latscope.lab.breaker`): off unless set; it opens
    #: when ``circuit_error_ratio`` of the last ``circuit_window`` requests (at least ``circuit_min_requests``) failed
    #: upstream, refuses everything for ``circuit_open_s`` seconds (503, Retry-After), then lets one probe through
    circuit_breaker: bool = False
    circuit_error_ratio: float = 0.5
    circuit_window: int = 20
    circuit_min_requests: int = 10
    circuit_open_s: float = 5.0
    #: the share of requests the engine fails before their first token (503 ``engine_unavailable``), drawn from
    #: ``seed``: an unhealthy upstream for the breaker to trip on; 0 fails none
    upstream_error_rate: float = 0.0
    #: what the gateway spends preprocessing images, ms per MB of image; None: what the faults imply (a small cost,
    #: or ``slow-image-preprocessing``'s)
    image_ms_per_mb: float | None = None

    def __post_init__(self) -> None:
        # the Python API takes lists and strings where these are tuples and paths; a frozen value holds them as such
        for name in ("faults", "no_faults"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        if self.batch_log is not None and not isinstance(self.batch_log, Path):
            object.__setattr__(self, "batch_log", Path(self.batch_log))
        if not 0.0 <= self.upstream_error_rate <= 1.0:
            raise ValueError(f"upstream_error_rate must be in [0, 1], got {self.upstream_error_rate!r}")
        self.breaker  # noqa: B018 — validates the breaker's values now, not when the first request comes

    @property
    def breaker(self) -> BreakerConfig | None:
        """The circuit breaker's configuration, None when it is off (raises ValueError for impossible values)."""
        if not self.circuit_breaker:
            return None
        return BreakerConfig(
            error_ratio=self.circuit_error_ratio,
            window=self.circuit_window,
            min_requests=self.circuit_min_requests,
            open_s=self.circuit_open_s,
        )

    @property
    def active_faults(self) -> frozenset[str]:
        """The faults that are on (raises :class:`~latscope.lab.faults.UnknownFaultError` for unknown names)."""
        return resolve_faults(self.profile, self.faults, self.no_faults)

    @property
    def keep_alive(self) -> bool:
        return NO_KEEPALIVE not in self.active_faults

    @property
    def tls_resumption(self) -> bool:
        return TLS_NO_TICKETS not in self.active_faults

    @property
    def http2_enabled(self) -> bool:
        return self.http2 and NO_H2 not in self.active_faults

    @property
    def nodelay(self) -> bool:
        return NAGLE not in self.active_faults

    @property
    def slow_parse(self) -> bool:
        return SLOW_PARSE in self.active_faults

    @property
    def idempotency(self) -> bool:
        """The gateway honours ``Idempotency-Key`` (not under ``no-idempotency``)."""
        return NO_IDEMPOTENCY not in self.active_faults

    @property
    def drop_trace_context(self) -> bool:
        """The edge strips the incoming ``traceparent`` (``drop-trace-context``)."""
        return DROP_TRACE_CONTEXT in self.active_faults

    @property
    def header_scan_ms_per_kb(self) -> float | None:
        """What the gateway spends per KB of request headers, ms (``header-scan``), None when nothing."""
        return HEADER_SCAN_MS_PER_KB if HEADER_SCAN in self.active_faults else None

    @property
    def image_preprocess_ms_per_mb(self) -> float:
        """What the gateway spends preprocessing images, ms per MB: the explicit setting, else
        ``slow-image-preprocessing``'s, else the tuned lab's small cost."""
        if self.image_ms_per_mb is not None:
            return self.image_ms_per_mb
        return SLOW_IMAGE_MS_PER_MB if SLOW_IMAGE_PREPROCESSING in self.active_faults else DEFAULT_MS_PER_MB

    @property
    def response_cache(self) -> Literal["headers", "silent"] | None:
        """A response cache keyed on the request body sits in front: ``"headers"`` (``response-cache``: it says
        so), ``"silent"`` (``silent-response-cache``: it does not), None without one."""
        faults = self.active_faults
        if RESPONSE_CACHE in faults:
            return "headers"
        return "silent" if SILENT_RESPONSE_CACHE in faults else None

    @property
    def proxy_buffer_bytes(self) -> int | None:
        """Bytes the stream writer holds back before writing, None when it writes every event at once."""
        return PROXY_BUFFER_BYTES if PROXY_BUFFERING in self.active_faults else None

    @property
    def idle_timeout_s(self) -> float:
        """Seconds an idle keep-alive connection stays open (``short-keepalive`` caps it)."""
        if SHORT_KEEPALIVE in self.active_faults:
            return min(self.keepalive_timeout_s, SHORT_KEEPALIVE_TIMEOUT_S)
        return self.keepalive_timeout_s

    def rate_limit(self) -> RateLimitConfig:
        """The gateway's limiter: the explicit settings, else what ``rate-limit`` (reject) or ``gateway-queue``
        (queue) implies; :attr:`RateLimitConfig.enabled` is False when neither limits anything."""
        faults = self.active_faults
        mode, rpm, burst, wait = None, None, None, None
        if GATEWAY_QUEUE in faults:
            mode, rpm, burst = LimitMode.QUEUE, GATEWAY_QUEUE_REQUESTS_PER_MIN, GATEWAY_QUEUE_BURST
            wait = GATEWAY_QUEUE_MAX_WAIT_S
        elif RATE_LIMIT in faults:
            mode, rpm = LimitMode.REJECT, RATE_LIMIT_REQUESTS_PER_MIN
        default = RateLimitConfig()
        return RateLimitConfig(
            mode=self.rate_limit_mode or mode or default.mode,
            requests_per_min=self.rate_limit_requests_per_min if self.rate_limit_requests_per_min is not None else rpm,
            tokens_per_min=self.rate_limit_tokens_per_min,
            burst=self.rate_limit_burst if self.rate_limit_burst is not None else burst,
            max_wait_s=next(w for w in (self.rate_limit_max_wait_s, wait, default.max_wait_s) if w is not None),
        )

    def gateway_hop(self) -> tuple[float, float] | None:
        """The gateway hop's costs (ms per request, ms per streamed chunk) when one sits in front: the explicit
        settings, else ``gateway-overhead``'s; None when neither puts a hop there."""
        fault = GATEWAY_OVERHEAD in self.active_faults
        if not fault and self.gateway_hop_ms is None and self.gateway_chunk_ms is None:
            return None
        request_ms = self.gateway_hop_ms if self.gateway_hop_ms is not None else (GATEWAY_HOP_MS if fault else 0.0)
        chunk_ms = self.gateway_chunk_ms if self.gateway_chunk_ms is not None else (GATEWAY_CHUNK_MS if fault else 0.0)
        return request_ms, chunk_ms

    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            header_timeout_s=self.header_timeout_s,
            keepalive_timeout_s=self.idle_timeout_s,
            max_header_bytes=self.max_header_bytes,
            max_body_bytes=self.max_body_bytes,
        )

    def scheduler_config(self) -> SchedulerConfig:
        faults = self.active_faults
        policy = self.policy or (Policy.FIFO if QUEUE_HOL in faults else Policy.PRIORITY)
        window_fault = BATCHING_WINDOW in faults
        window = (
            self.batch_window_ms if self.batch_window_ms is not None else (BATCHING_WINDOW_MS if window_fault else 0.0)
        )
        trigger = self.batch_trigger if self.batch_trigger is not None else (BATCHING_TRIGGER if window_fault else 1)
        return SchedulerConfig(
            policy=policy, cost=self.engine_cost, batch_window_ms=window, batch_trigger=trigger, seed=self.seed
        )

    @property
    def engine_cost(self) -> CostModel:
        """The cost model the engine runs: ``cost`` with the engine faults applied (``naive-attention`` scales the
        per-token² prefill cost, ``few-slots`` caps the batch, ``small-kv-cache`` the KV blocks, ``slow-sampling``
        adds a host cost to the decode steps of sampled requests)."""
        faults = self.active_faults
        cost = self.cost
        if NAIVE_ATTENTION in faults:
            cost = cost.with_overrides(prefill_quadratic_ms=cost.prefill_quadratic_ms * NAIVE_ATTENTION_FACTOR)
        if FEW_SLOTS in faults:
            cost = cost.with_overrides(max_batch=min(cost.max_batch, FEW_SLOTS_MAX_BATCH))
        if SMALL_KV_CACHE in faults:
            cost = cost.with_overrides(kv_blocks=min(cost.kv_blocks, SMALL_KV_CACHE_BLOCKS))
        if SLOW_SAMPLING in faults:
            cost = cost.with_overrides(sampling_ms=cost.sampling_ms + SLOW_SAMPLING_MS)
        return cost
