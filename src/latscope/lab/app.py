"""The :class:`Lab`: the reference OpenAI-compatible server, in-process.

Usage::

    async with Lab(profile="naive", truth=True) as lab:
        ...  # point a client at lab.url ("http://127.0.0.1:PORT/v1")
        lab.records[-1].queue_ms  # what the lab injected for the latest request

It runs on the caller's event loop (the CLI runs it on uvloop). Stages: edge (:mod:`latscope.lab.http`, with
keep-alive, TLS, ALPN and socket faults), gateway (:mod:`latscope.lab.gateway`), scheduler and engine
(:mod:`latscope.lab.scheduler`), stream writer (:mod:`latscope.lab.writer`).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING, Any

from latscope.lab.batchlog import BatchLog
from latscope.lab.breaker import CircuitBreaker
from latscope.lab.certs import CertFiles, generate_self_signed, remove_cert_files
from latscope.lab.front import HeaderScanEdge, ResponseCacheEdge, front_door
from latscope.lab.gateway import Gateway
from latscope.lab.handlers import LabService
from latscope.lab.http.exchange import Handler
from latscope.lab.http.server import HttpServer
from latscope.lab.idempotency import Idempotency, open_store
from latscope.lab.idemstore import IdempotencyStore
from latscope.lab.metrics import LabMetrics
from latscope.lab.records import RequestRecord, new_record_log
from latscope.lab.scheduler import Scheduler
from latscope.lab.serving import AsyncService, Served, origin_of, server_options
from latscope.lab.settings import LabSettings

if TYPE_CHECKING:
    from latscope.lab.http.http3 import H3Server


class Lab(Served, AsyncService):
    """The lab server. Construct with a :class:`LabSettings` and/or its fields as keywords, then ``async with`` or
    :meth:`start` / :meth:`stop`.

    Attributes once started: :attr:`url` (``http[s]://HOST:PORT/v1``), :attr:`origin` (without ``/v1``),
    :attr:`port`, :attr:`cert_path` (TLS only: the certificate a client must trust), :attr:`records` (per-request
    ground truth, newest last), :attr:`scheduler`, :attr:`metrics`, :attr:`faults`, :attr:`cache_hits`,
    :attr:`cache_responses_replayed`.
    """

    def __init__(self, settings: LabSettings | None = None, /, **overrides: Any) -> None:
        """``settings`` (default: the tuned lab) with the :class:`LabSettings` fields named in ``overrides``
        replaced (``dataclasses.replace``): ``Lab(profile="naive", truth=True)``, ``Lab(settings, port=0)``. An
        unknown field raises :class:`TypeError`, an unknown fault :class:`~latscope.lab.faults.UnknownFaultError`."""
        base = settings if settings is not None else LabSettings()
        self._init(dataclasses.replace(base, **overrides) if overrides else base)

    def _init(self, settings: LabSettings) -> None:
        self.settings = settings
        self.faults: frozenset[str] = settings.active_faults  # validates the fault names now, not at start
        if settings.gateway_hop() is not None:
            raise ValueError("a gateway hop (gateway-overhead) sits in front of a lab: use latscope.lab.hop.HopLab")
        self.records: collections.deque[RequestRecord] = new_record_log(settings.records_max)
        self.metrics = LabMetrics(names=settings.metrics_names, model_name=settings.model)
        self.batch_log = BatchLog(settings.batch_log) if settings.batch_log is not None else None
        self.scheduler = Scheduler(settings.scheduler_config(), metrics=self.metrics, batch_log=self.batch_log)
        self.host = settings.host
        self.port = 0
        self._cert: CertFiles | None = None
        self._server: HttpServer | None = None
        self._h3: H3Server | None = None
        self._front: Handler | None = None
        self._service: LabService | None = None
        #: where ``Idempotency-Key`` claims and answers are kept (``settings.idempotency_store``), once started
        self.idempotency_store: IdempotencyStore | None = None

    # -- addresses -------------------------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        """``scheme://host:port`` (IPv6 hosts in brackets)."""
        return origin_of(self.settings.tls, self.host, self.port)

    @property
    def connections_accepted(self) -> int:
        """TCP connections accepted so far."""
        return self._server.connections_accepted if self._server is not None else 0

    @property
    def http3_connections_accepted(self) -> int:
        """QUIC connections accepted so far (0 without ``http3``)."""
        return self._h3.connections_accepted if self._h3 is not None else 0

    @property
    def cache_hits(self) -> int:
        """Requests the ``response-cache`` fault answered from storage so far (0 without it): ground truth."""
        front = self._front
        return front.hits if isinstance(front, ResponseCacheEdge) else 0

    @property
    def cache_responses_replayed(self) -> int:
        """Distinct stored responses the ``response-cache`` fault replayed so far (0 without it): ground truth."""
        front = self._front
        return len(front.replayed) if isinstance(front, ResponseCacheEdge) else 0

    @property
    def header_scan_held(self) -> list[tuple[int, float]]:
        """(head bytes, ms held) of the latest requests the ``header-scan`` fault held (empty without it): ground
        truth of what it costs per KB."""
        handler: object = self._front
        while handler is not None and not isinstance(handler, HeaderScanEdge):
            handler = getattr(handler, "inner", None)
        return list(handler.held) if isinstance(handler, HeaderScanEdge) else []

    @property
    def breaker(self) -> CircuitBreaker | None:
        """The gateway's circuit breaker while the lab runs (None when it is off or the lab is stopped)."""
        return self._service.breaker if self._service is not None else None

    @property
    def upstream_error_rate(self) -> float:
        """The share of requests the engine fails before their first token (``settings.upstream_error_rate`` until
        changed): settable while the lab runs, so an unhealthy upstream can recover."""
        return self._service.upstream_error_rate if self._service is not None else self.settings.upstream_error_rate

    @upstream_error_rate.setter
    def upstream_error_rate(self, rate: float) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"upstream_error_rate must be in [0, 1], got {rate!r}")
        if self._service is None:
            raise RuntimeError("the lab is not running")
        self._service.upstream_error_rate = rate

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the idempotency store (a Redis one must answer), generate the certificate (TLS), start the engine
        loop, bind and listen."""
        if self._server is not None:
            return
        settings = self.settings
        if settings.http3 and not settings.tls:
            raise ValueError("HTTP/3 needs TLS: QUIC always encrypts (turn tls on)")
        h3_module = _http3_module() if settings.http3 else None
        store = open_store(settings.idempotency_store)  # ValueError for an unknown store
        try:
            await store.check()  # StoreUnavailableError: say so now rather than 503 every keyed request
        except BaseException:
            await store.close()
            raise
        self.idempotency_store = store
        if settings.tls:
            self._cert = generate_self_signed(hosts=(settings.host,))
        gateway = Gateway(
            model=settings.model,
            api_key=settings.api_key,
            slow_parse=settings.slow_parse,
            max_context_tokens=settings.engine_cost.kv_capacity_tokens,
            rate_limit=settings.rate_limit(),
            image_ms_per_mb=settings.image_preprocess_ms_per_mb,
        )
        idempotency = (
            Idempotency(store, ttl_s=settings.idempotency_ttl_s, wait_s=settings.idempotency_wait_s)
            if settings.idempotency
            else None
        )
        service = self._service = LabService(
            settings,
            gateway=gateway,
            scheduler=self.scheduler,
            metrics=self.metrics,
            records=self.records,
            idempotency=idempotency,
        )
        options = server_options(settings, self._cert, reuse_port=settings.reuse_port)
        await self.scheduler.start()
        handler = front_door(service, settings.front())
        self._front = handler
        tcp_handler = handler if h3_module is None else h3_module.with_alt_svc(handler, lambda: self.port)
        server = HttpServer(tcp_handler, options)
        h3: H3Server | None = None
        try:
            self.host, self.port = await server.start(settings.host, settings.port)
            if h3_module is not None:
                assert self._cert is not None
                h3 = h3_module.H3Server(handler, self._cert, settings.limits(), resumption=settings.tls_resumption)
                await h3.start(self.host, self.port)  # the same port number, over UDP
        except BaseException:
            await server.close()
            await self.scheduler.stop()
            await self._close_store()
            self._remove_cert()
            raise
        self._server = server
        self._h3 = h3

    async def stop(self) -> None:
        """Close every connection (in-flight handlers are cancelled), stop the engine, delete the certificate."""
        server, self._server = self._server, None
        if server is not None:
            await server.close()
        h3, self._h3 = self._h3, None
        if h3 is not None:
            await h3.close()
        service, self._service = self._service, None
        if service is not None:
            await service.close()
        await self.scheduler.stop()
        await self._close_store()
        self._remove_cert()

    async def _close_store(self) -> None:
        store, self.idempotency_store = self.idempotency_store, None
        if store is not None:
            await store.close()

    def _remove_cert(self) -> None:
        if self._cert is not None:
            remove_cert_files(self._cert)
            self._cert = None


def _http3_module() -> Any:
    """:mod:`latscope.lab.http.http3`, imported when a lab serves HTTP/3 (aioquic is an optional dependency)."""
    try:
        from latscope.lab.http import http3
    except ImportError as exc:
        raise ValueError(f"HTTP/3 needs aioquic ({exc}): pip install 'latscope[http3]'") from None
    return http3
