"""What the nginx edge is configured with, and how the lab's edge faults map onto real nginx directives.

The lab reproduces the network-level bottlenecks itself (:mod:`latscope.lab.http`), but users meet them in a
reverse proxy. With an nginx edge in front, the same fault names switch the directives that cause them in nginx:

===================  ============================================================================================
fault                nginx
===================  ============================================================================================
``proxy-buffering``  ``proxy_buffering on; proxy_ignore_headers X-Accel-Buffering;`` (the lab origin sends
                     ``X-Accel-Buffering: no``, which would otherwise switch buffering off per response). The
                     bursts show over HTTP/1.1 on TLS (``ssl_buffer_size``, 16 KB); over plain HTTP and HTTP/2,
                     nginx 1.22 still passes about one event per read
``tls-no-tickets``   ``ssl_session_tickets off; ssl_session_cache off;`` (both: OpenSSL resumes by ticket *and*
                     by session id, see :mod:`latscope.lab.tls`)
``no-h2``            ``listen ... ssl`` without ``http2``: ALPN offers only http/1.1
``short-keepalive``  ``keepalive_timeout 200ms;``
``no-keepalive``     ``keepalive_timeout 0;`` (HTTP/1.1: ``Connection: close`` on every response; HTTP/2: nginx
                     sends GOAWAY naming the request's stream as soon as the request arrives, answers it, then closes)
``nagle``            ``tcp_nodelay off;``
``drop-trace-        ``proxy_set_header traceparent ""; proxy_set_header tracestate "";`` (an empty value removes
context``            the header): the origin never sees the client's trace and answers a ``traceresponse`` of its own
``rate-limit``       ``limit_req zone=… burst=19 nodelay; limit_req_status 429;`` with a ``rate=20r/m`` zone keyed on
                     the client address: a bucket of 20 requests refilled one each 3 s, refusals answered 429 with
                     ``Retry-After: 3`` (nginx sends none by itself; an ``error_page`` adds it, as operators do)
``gateway-queue``    ``limit_req zone=… burst=20 delay=3;`` with a ``rate=10r/s`` zone: three requests beyond the
                     rate pass at once, the next wait in nginx to fit the rate, up to 20 (2 s); beyond that 429
``response-cache``   ``proxy_cache`` keyed on method, URI and request body (``proxy_cache_methods POST``), the
                     origin's ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no`` ignored (nginx caches only
                     what it buffers), ``add_header X-Cache-Status $upstream_cache_status``
``silent-response-   the same cache without the ``X-Cache-Status`` header
cache``
===================  ============================================================================================

The gateway faults are the lab's own limiter (:mod:`latscope.lab.ratelimit`) played by nginx's ``limit_req``
with the same rates, and its response cache (:mod:`latscope.lab.front`) played by nginx's ``proxy_cache``; the
origin behind such an edge limits and caches nothing. The other faults (``slow-parse``,
``queue-hol``, ``batching-window``, …) live in the origin lab behind the edge.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from latscope.lab.faults import (
    DROP_TRACE_CONTEXT,
    FAULTS,
    GATEWAY_QUEUE,
    NAGLE,
    NO_H2,
    NO_KEEPALIVE,
    PROXY_BUFFERING,
    RATE_LIMIT,
    RESPONSE_CACHE,
    SHORT_KEEPALIVE,
    SILENT_RESPONSE_CACHE,
    TLS_NO_TICKETS,
    FaultSet,
    Stage,
    UnknownFaultError,
)
from latscope.lab.ratelimit import LimitMode
from latscope.lab.stageknobs import EdgeKnobs, FrontKnobs, GatewayKnobs, WriterKnobs

#: The lab faults an nginx edge reproduces with its own directives (what :meth:`EdgeConfig.from_faults` maps): every
#: edge-stage fault, and the gateway faults nginx's ``limit_req`` plays.
EDGE_FAULTS: frozenset[str] = frozenset(
    {
        PROXY_BUFFERING,
        TLS_NO_TICKETS,
        NO_H2,
        NO_KEEPALIVE,
        SHORT_KEEPALIVE,
        NAGLE,
        DROP_TRACE_CONTEXT,
        RATE_LIMIT,
        GATEWAY_QUEUE,
        RESPONSE_CACHE,
        SILENT_RESPONSE_CACHE,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeRateLimit:
    """nginx's ``limit_req`` on every request, keyed on the client's address.

    Fields:
        requests_per_min: the rate requests are let through at, per minute (nginx's ``rate=``; whole requests per
            second where it divides evenly, so nginx keeps its millisecond accounting exact).
        burst: requests beyond the rate nginx accepts (``burst=``); more than that are refused at once.
        delay: queue mode: how many of the ``burst`` pass at once (``delay=``), the rest wait in nginx until the rate
            lets them through; None: reject mode (``nodelay``), the whole burst passes at once and nothing waits.
        retry_after_s: the ``Retry-After`` a refusal carries, s: one request's share of the rate, rounded up.
    """

    requests_per_min: int
    burst: int
    delay: int | None = None
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        if self.requests_per_min < 1:
            raise ValueError(f"EdgeRateLimit.requests_per_min must be >= 1, got {self.requests_per_min!r}")
        if self.burst < 0 or (self.delay is not None and not 0 <= self.delay <= self.burst):
            raise ValueError(f"EdgeRateLimit needs 0 <= delay <= burst, got burst={self.burst!r} delay={self.delay!r}")
        if self.retry_after_s < 1:
            raise ValueError(f"EdgeRateLimit.retry_after_s must be >= 1, got {self.retry_after_s!r}")

    @property
    def rate(self) -> str:
        """nginx's ``rate=`` value: per second where the per-minute rate divides evenly, else per minute."""
        if self.requests_per_min % 60 == 0:
            return f"{self.requests_per_min // 60}r/s"
        return f"{self.requests_per_min}r/m"

    @classmethod
    def reject(cls, requests_per_min: int) -> EdgeRateLimit:
        """The lab's ``rate-limit``: a bucket of a whole minute's quota, refusals at once (429)."""
        return cls(
            requests_per_min=requests_per_min,
            burst=requests_per_min - 1,
            retry_after_s=math.ceil(60 / requests_per_min),
        )

    @classmethod
    def queue(cls, requests_per_min: int, burst: int, max_wait_s: float) -> EdgeRateLimit:
        """The lab's ``gateway-queue``: ``burst`` requests beyond the rate at once, then a wait of up to
        ``max_wait_s`` (s) in nginx before a 429."""
        waiting = math.floor(max_wait_s * requests_per_min / 60)
        return cls(
            requests_per_min=requests_per_min,
            burst=burst + waiting,
            delay=burst,
            retry_after_s=math.ceil(60 / requests_per_min),
        )


#: nginx's own default ``keepalive_timeout`` (75 s), s: the tuned edge behaves like a stock nginx here.
DEFAULT_KEEPALIVE_TIMEOUT_S = 75.0
#: nginx's own default ``keepalive_requests``: requests one client connection carries before nginx closes it.
DEFAULT_KEEPALIVE_REQUESTS = 1000
#: Idle connections to the origin each nginx worker keeps open: more than a diagnose run has streams in flight
#: at once on one core, so steady load never opens a new upstream connection.
DEFAULT_UPSTREAM_KEEPALIVE = 32
#: How long nginx keeps an idle upstream connection, s. nginx never retries a POST on a connection the origin has
#: just closed (``proxy_next_upstream`` skips non-idempotent requests since 1.9.13), so the edge must give up an
#: idle connection before the origin does; the lab origin waits 75 s (``DEFAULT_KEEPALIVE_TIMEOUT_S`` there).
DEFAULT_UPSTREAM_KEEPALIVE_TIMEOUT_S = 60.0
#: Longest silence nginx accepts from the origin while a response is being read, s. A queued request under load
#: can wait minutes for its first token; nginx's 60 s default would turn that into a 504.
DEFAULT_PROXY_READ_TIMEOUT_S = 3600.0
#: Largest request body the edge accepts, bytes: diagnose's slow-request-parsing experiment pads bodies to a few
#: MB, and nginx's 1 MB default would answer those with 413 before the origin sees them.
DEFAULT_CLIENT_MAX_BODY_BYTES = 32 * 1024 * 1024
#: Connections nginx serves at once (each proxied request holds two: client and upstream).
DEFAULT_WORKER_CONNECTIONS = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeConfig:
    """The nginx edge's settings. The defaults are the tuned edge: what a well-configured proxy for SSE looks like.

    Fields:
        tls: serve HTTPS with a self-signed certificate for ``localhost`` / ``127.0.0.1`` (generated on start).
        http2: offer ``h2`` by ALPN. Only with ``tls``: on a cleartext port nginx would speak HTTP/2 by prior
            knowledge only and refuse HTTP/1.1 clients, so plain listeners ignore it.
        proxy_buffering: buffer the origin's response (``proxy_buffering on``, also ignoring the origin's
            ``X-Accel-Buffering: no``). Over TLS the stream then leaves nginx in ``ssl_buffer_size`` (16 KB) bursts.
        session_tickets: ``ssl_session_tickets`` (stateless TLS resumption).
        session_cache: a shared ``ssl_session_cache`` (stateful resumption by session id); False writes
            ``ssl_session_cache off``, which tells clients that no session may be reused.
        keepalive_timeout_s: idle time before nginx closes a client connection, s; 0 switches keep-alive off.
        keepalive_requests: requests one client connection carries before nginx closes it (HTTP/2: GOAWAY).
        tcp_nodelay: ``tcp_nodelay`` on client connections; False leaves Nagle's algorithm on.
        propagate_trace_context: pass the client's ``traceparent`` / ``tracestate`` to the origin (nginx's default);
            False removes both.
        upstream_keepalive: idle connections to the origin kept per worker; 0 opens one per request (HTTP/1.0
            with ``Connection: close``, nginx's default).
        upstream_keepalive_timeout_s: idle time before nginx drops an upstream connection, s; keep it below the
            origin's own idle timeout.
        proxy_read_timeout_s: longest gap between two reads from the origin, s.
        client_max_body_bytes: largest request body accepted, bytes (413 above).
        worker_connections: simultaneous connections (client + upstream) nginx handles.
        rate_limit: nginx's ``limit_req`` in front of the origin (None: no limit).
        response_cache: cache the origin's answers (``proxy_cache`` keyed on the request body; buffers them).
        cache_status_header: with ``response_cache``, say ``X-Cache-Status: HIT`` / ``MISS`` on every answer.
        faults: the lab fault names this configuration reproduces (informational; set by :meth:`from_faults`).
    """

    tls: bool = True
    http2: bool = True
    proxy_buffering: bool = False
    session_tickets: bool = True
    session_cache: bool = True
    keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S
    keepalive_requests: int = DEFAULT_KEEPALIVE_REQUESTS
    tcp_nodelay: bool = True
    propagate_trace_context: bool = True
    upstream_keepalive: int = DEFAULT_UPSTREAM_KEEPALIVE
    upstream_keepalive_timeout_s: float = DEFAULT_UPSTREAM_KEEPALIVE_TIMEOUT_S
    proxy_read_timeout_s: float = DEFAULT_PROXY_READ_TIMEOUT_S
    client_max_body_bytes: int = DEFAULT_CLIENT_MAX_BODY_BYTES
    worker_connections: int = DEFAULT_WORKER_CONNECTIONS
    rate_limit: EdgeRateLimit | None = None
    response_cache: bool = False
    cache_status_header: bool = True
    faults: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("keepalive_timeout_s", "upstream_keepalive_timeout_s", "proxy_read_timeout_s"):
            value = getattr(self, name)
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"EdgeConfig.{name} must be >= 0, got {value!r}")
        if self.keepalive_requests < 1:
            raise ValueError(f"EdgeConfig.keepalive_requests must be >= 1, got {self.keepalive_requests!r}")
        if self.upstream_keepalive < 0:
            raise ValueError(f"EdgeConfig.upstream_keepalive must be >= 0, got {self.upstream_keepalive!r}")
        if self.client_max_body_bytes < 0:
            raise ValueError(f"EdgeConfig.client_max_body_bytes must be >= 0, got {self.client_max_body_bytes!r}")
        if self.worker_connections < 16:
            raise ValueError(f"EdgeConfig.worker_connections must be >= 16, got {self.worker_connections!r}")

    @property
    def http2_enabled(self) -> bool:
        """True when the listener offers h2 (TLS with ``http2``)."""
        return self.tls and self.http2

    @property
    def keep_alive(self) -> bool:
        """True when client connections outlive their first response."""
        return self.keepalive_timeout_s > 0

    @property
    def tls_resumption(self) -> bool:
        """True when a returning client can resume its TLS session one way or another."""
        return self.tls and (self.session_tickets or self.session_cache)

    @classmethod
    def from_faults(cls, faults: Iterable[str], tls: bool) -> EdgeConfig:
        """The edge that reproduces ``faults`` with real nginx directives, every other setting tuned.

        Faults that live in the origin (``slow-parse``, ``queue-hol``, ``batching-window``) are accepted and left
        out: they are the origin lab's business. TLS faults on a plain edge are kept in :attr:`faults` but change
        nothing, as on a real server. Raises :class:`~latscope.lab.faults.UnknownFaultError` for a name the lab
        does not know.
        """
        names = frozenset(faults)
        unknown = sorted(names - FAULTS.keys())
        if unknown:
            raise UnknownFaultError(f"unknown fault {', '.join(unknown)}; known faults: {', '.join(FAULTS)}")
        edge_faults, _ = split_faults(names)
        active = FaultSet.of(edge_faults)
        edge = active.edge(EdgeKnobs(idle_timeout_s=DEFAULT_KEEPALIVE_TIMEOUT_S))
        front = active.front(FrontKnobs())
        return cls(
            tls=tls,
            http2=edge.http2,
            proxy_buffering=active.writer(WriterKnobs()).buffer_bytes is not None,
            session_tickets=edge.tls_resumption,
            session_cache=edge.tls_resumption,
            keepalive_timeout_s=edge.idle_timeout_s if edge.keep_alive else 0.0,
            tcp_nodelay=edge.nodelay,
            propagate_trace_context=not front.drop_trace_context,
            rate_limit=_edge_rate_limit(active.gateway(GatewayKnobs())),
            response_cache=front.response_cache is not None,
            cache_status_header=front.response_cache == "headers",
            faults=edge_faults,
        )


def _edge_rate_limit(gateway: GatewayKnobs) -> EdgeRateLimit | None:
    """nginx's ``limit_req`` for the gateway's limiter as the faults leave it (None when they leave none)."""
    rpm = gateway.limit_requests_per_min
    if gateway.limit_mode is None or rpm is None:
        return None
    if gateway.limit_mode is LimitMode.QUEUE:
        assert gateway.limit_burst is not None and gateway.limit_max_wait_s is not None
        return EdgeRateLimit.queue(rpm, gateway.limit_burst, gateway.limit_max_wait_s)
    return EdgeRateLimit.reject(rpm)


def split_faults(faults: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """``(edge, origin)``: the faults an nginx edge reproduces, and those the origin lab must inject itself.

    Raises ``ValueError`` for an edge-stage fault that has no nginx mapping yet, rather than silently dropping it.
    """
    names = frozenset(faults)
    edge = names & EDGE_FAULTS
    unmapped = sorted(name for name in names - EDGE_FAULTS if name in FAULTS and FAULTS[name].stage is Stage.EDGE)
    if unmapped:
        raise ValueError(f"fault {', '.join(unmapped)} has no nginx equivalent in the edge yet")
    return edge, names - edge
