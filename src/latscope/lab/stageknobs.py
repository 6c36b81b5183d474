"""What a fault may change in each stage of the lab: one frozen value per stage, tuned by default.

A :class:`~latscope.lab.faults.Fault` has one hook per stage (:meth:`~latscope.lab.faults.Fault.edge`,
:meth:`~latscope.lab.faults.Fault.front`, ...) that takes the stage's knobs and returns them changed; the lab folds
the active faults over the tuned knobs and builds each stage from the result. The engine's knobs are its
:class:`~latscope.lab.costmodel.CostModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from latscope.lab.ratelimit import LimitMode

#: A response cache in front that says so (``Age``, ``X-Cache``) or one that does not.
CacheMode = Literal["headers", "silent"]


@dataclass(frozen=True, slots=True)
class EdgeKnobs:
    """Connection handling: keep-alive, its idle timeout (s), TLS resumption, HTTP/2 and TCP_NODELAY."""

    idle_timeout_s: float
    http2: bool = True
    keep_alive: bool = True
    tls_resumption: bool = True
    nodelay: bool = True


@dataclass(frozen=True, slots=True)
class FrontKnobs:
    """What sits in front of the service: trace context handling, a response cache, a header scan (ms per KB)."""

    drop_trace_context: bool = False
    response_cache: CacheMode | None = None
    header_scan_ms_per_kb: float | None = None


@dataclass(frozen=True, slots=True)
class GatewayKnobs:
    """Body parsing, image preprocessing (ms per MB), the rate limiter's defaults (requests per minute, burst,
    longest wait in s; None: not limited), ``Idempotency-Key`` handling and a converting hop in front (ms per
    request, ms per streamed chunk; None: no hop)."""

    slow_parse: bool = False
    image_ms_per_mb: float | None = None  #: None: the tuned image stage (``images.DEFAULT_MS_PER_MB``)
    limit_mode: LimitMode | None = None
    limit_requests_per_min: int | None = None
    limit_burst: int | None = None
    limit_max_wait_s: float | None = None
    idempotency: bool = True
    hop: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class SchedulerKnobs:
    """Queueing and batching: FIFO (else shortest first with chunked prefill), the batching window (ms) and the
    waiting requests that close it early."""

    fifo: bool = False
    batch_window_ms: float = 0.0
    batch_trigger: int = 1


@dataclass(frozen=True, slots=True)
class WriterKnobs:
    """The stream writer: bytes it holds back before writing, None when it writes every event at once."""

    buffer_bytes: int | None = None
