"""Everything a lab is configured with, in one frozen value shared by the Python API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from latscope.lab.breaker import BreakerConfig
from latscope.lab.costmodel import CostModel
from latscope.lab.faults import FaultSet, resolve_faults
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
from latscope.lab.stageknobs import CacheMode, EdgeKnobs, FrontKnobs, GatewayKnobs, SchedulerKnobs, WriterKnobs

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
    def fault_set(self) -> FaultSet:
        """The active faults, composed (raises :class:`~latscope.lab.faults.UnknownFaultError` for unknown names)."""
        return FaultSet.of(self.active_faults)

    def edge(self) -> EdgeKnobs:
        """Connection handling as the faults leave it (``http2`` and the keep-alive timeout are where it starts)."""
        return self.fault_set.edge(EdgeKnobs(idle_timeout_s=self.keepalive_timeout_s, http2=self.http2))

    def front(self) -> FrontKnobs:
        """What sits in front of the service as the faults leave it."""
        return self.fault_set.front(FrontKnobs())

    def writer(self) -> WriterKnobs:
        """The stream writer as the faults leave it."""
        return self.fault_set.writer(WriterKnobs())

    def _gateway(self) -> GatewayKnobs:
        """The gateway as the faults leave it, before the explicit settings."""
        return self.fault_set.gateway(GatewayKnobs())

    @property
    def keep_alive(self) -> bool:
        return self.edge().keep_alive

    @property
    def tls_resumption(self) -> bool:
        return self.edge().tls_resumption

    @property
    def http2_enabled(self) -> bool:
        return self.edge().http2

    @property
    def nodelay(self) -> bool:
        return self.edge().nodelay

    @property
    def slow_parse(self) -> bool:
        return self._gateway().slow_parse

    @property
    def idempotency(self) -> bool:
        """The gateway honours ``Idempotency-Key`` (not under ``no-idempotency``)."""
        return self._gateway().idempotency

    @property
    def drop_trace_context(self) -> bool:
        """The edge strips the incoming ``traceparent`` (``drop-trace-context``)."""
        return self.front().drop_trace_context

    @property
    def header_scan_ms_per_kb(self) -> float | None:
        """What the gateway spends per KB of request headers, ms (``header-scan``), None when nothing."""
        return self.front().header_scan_ms_per_kb

    @property
    def image_preprocess_ms_per_mb(self) -> float:
        """What the gateway spends preprocessing images, ms per MB: the explicit setting, else
        ``slow-image-preprocessing``'s, else the tuned lab's small cost."""
        if self.image_ms_per_mb is not None:
            return self.image_ms_per_mb
        implied = self._gateway().image_ms_per_mb
        return implied if implied is not None else DEFAULT_MS_PER_MB

    @property
    def response_cache(self) -> CacheMode | None:
        """A response cache keyed on the request body sits in front: ``"headers"`` (``response-cache``: it says
        so), ``"silent"`` (``silent-response-cache``: it does not), None without one."""
        return self.front().response_cache

    @property
    def idle_timeout_s(self) -> float:
        """Seconds an idle keep-alive connection stays open (``short-keepalive`` caps it)."""
        return self.edge().idle_timeout_s

    def rate_limit(self) -> RateLimitConfig:
        """The gateway's limiter: the explicit settings, else what ``rate-limit`` (reject) or ``gateway-queue``
        (queue) implies; :attr:`RateLimitConfig.enabled` is False when neither limits anything."""
        implied = self._gateway()
        default = RateLimitConfig()
        rpm = self.rate_limit_requests_per_min
        burst = self.rate_limit_burst
        return RateLimitConfig(
            mode=self.rate_limit_mode or implied.limit_mode or default.mode,
            requests_per_min=rpm if rpm is not None else implied.limit_requests_per_min,
            tokens_per_min=self.rate_limit_tokens_per_min,
            burst=burst if burst is not None else implied.limit_burst,
            max_wait_s=next(
                w for w in (self.rate_limit_max_wait_s, implied.limit_max_wait_s, default.max_wait_s) if w is not None
            ),
        )

    def gateway_hop(self) -> tuple[float, float] | None:
        """The gateway hop's costs (ms per request, ms per streamed chunk) when one sits in front: the explicit
        settings, else ``gateway-overhead``'s; None when neither puts a hop there."""
        implied = self._gateway().hop
        if implied is None and self.gateway_hop_ms is None and self.gateway_chunk_ms is None:
            return None
        request_ms, chunk_ms = implied or (0.0, 0.0)
        return (
            self.gateway_hop_ms if self.gateway_hop_ms is not None else request_ms,
            self.gateway_chunk_ms if self.gateway_chunk_ms is not None else chunk_ms,
        )

    def limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            header_timeout_s=self.header_timeout_s,
            keepalive_timeout_s=self.idle_timeout_s,
            max_header_bytes=self.max_header_bytes,
            max_body_bytes=self.max_body_bytes,
        )

    def scheduler_config(self) -> SchedulerConfig:
        """The scheduler: the explicit settings, else what ``queue-hol`` and ``batching-window`` imply."""
        implied = self.fault_set.scheduler(SchedulerKnobs())
        policy = self.policy or (Policy.FIFO if implied.fifo else Policy.PRIORITY)
        window = self.batch_window_ms if self.batch_window_ms is not None else implied.batch_window_ms
        trigger = self.batch_trigger if self.batch_trigger is not None else implied.batch_trigger
        return SchedulerConfig(
            policy=policy, cost=self.engine_cost, batch_window_ms=window, batch_trigger=trigger, seed=self.seed
        )

    @property
    def engine_cost(self) -> CostModel:
        """The cost model the engine runs: ``cost`` with the engine faults applied (``naive-attention`` scales the
        per-token² prefill cost, ``few-slots`` caps the batch, ``small-kv-cache`` the KV blocks, ``slow-sampling``
        adds a host cost to the decode steps of sampled requests)."""
        return self.fault_set.engine(self.cost)
