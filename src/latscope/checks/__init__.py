"""Checks: pure functions from an experiment's evidence to one outcome (Finding, NotTested, Inconclusive, Clear).

One module per family (a package where it is large), each holding its evidence class and its thresholds as named
constants next to the check:

* :mod:`~latscope.checks.dns` — ``slow-dns`` (reads the connection experiment's new connections)
* :mod:`~latscope.checks.connection` — ``no-connection-reuse``, ``tls-no-resumption``, ``http2-not-negotiated``
* :mod:`~latscope.checks.caching` — ``response-cached``
* :mod:`~latscope.checks.tracecontext` — ``trace-context-dropped``
* :mod:`~latscope.checks.headers` — ``request-header-bloat``
* :mod:`~latscope.checks.parsing` — ``slow-request-parsing``
* :mod:`~latscope.checks.multimodal` — ``multimodal-preprocessing``
* :mod:`~latscope.checks.queueing` — ``queue-head-of-line``
* :mod:`~latscope.checks.batching` — ``batching-window``
* :mod:`~latscope.checks.prefill` — ``prefill-superlinear``
* :mod:`~latscope.checks.prefixcache` — ``prefix-cache-miss``
* :mod:`~latscope.checks.saturation` — ``capacity-saturation``
* :mod:`~latscope.checks.kvcache` — ``kv-cache-pressure``
* :mod:`~latscope.checks.sampling` — ``decode-host-overhead``
* :mod:`~latscope.checks.streaming` — ``stream-coalescing-nagle``, ``stream-proxy-buffering`` (a package: evidence,
  measures, one module per check)
* :mod:`~latscope.checks.gateway` — ``gateway-queueing``
* :mod:`~latscope.checks.overhead` — ``gateway-overhead`` (against the upstream named by ``--direct``)
* :mod:`~latscope.checks.ratelimit` — ``rate-limited``
* :mod:`~latscope.checks.retries` — ``retry-amplification``: reads a bench run (``latscope bench --retries``), not a
  diagnosis experiment, so it is not in :data:`CHECKS`; :func:`latscope.load.bench.finish_run` runs it per step

:data:`CHECKS` is the registry: finding id → the evidence family it reads and the function. Checks never import
:mod:`latscope.diagnose` (it imports them). The types every family shares (one request, the typical request) are
in :mod:`~latscope.checks.samples`; the baseline's evidence, which no check reads, in :mod:`~latscope.checks.baseline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from latscope.checks.batching import check_batching_window
from latscope.checks.caching import check_response_cached
from latscope.checks.connection import check_connection_reuse, check_http2, check_tls_resumption
from latscope.checks.dns import check_slow_dns
from latscope.checks.gateway import check_gateway_queueing
from latscope.checks.headers import check_header_bloat
from latscope.checks.kvcache import check_kv_cache_pressure
from latscope.checks.multimodal import check_multimodal_preprocessing
from latscope.checks.overhead import check_gateway_overhead
from latscope.checks.parsing import check_request_parsing
from latscope.checks.prefill import check_prefill_superlinear
from latscope.checks.prefixcache import check_prefix_cache_miss
from latscope.checks.queueing import check_queue_head_of_line
from latscope.checks.ratelimit import check_rate_limited
from latscope.checks.samples import Reference
from latscope.checks.sampling import check_decode_host_overhead
from latscope.checks.saturation import check_capacity_saturation
from latscope.checks.streaming import check_nagle, check_proxy_buffering
from latscope.checks.tracecontext import check_trace_context
from latscope.findings import Outcome

#: A check: ``(evidence of its family, the typical request or None) -> outcome``.
CheckFunction = Callable[[Any, Reference | None], Outcome]


@dataclass(frozen=True, slots=True)
class Check:
    """One registered check: the finding id it decides, the evidence family it reads, and the function."""

    id: str
    family: str  #: the experiment family whose evidence it reads (a key of the experiment registry)
    run: CheckFunction


CHECKS: dict[str, Check] = {
    c.id: c
    for c in (
        Check("slow-dns", "connection", check_slow_dns),
        Check("no-connection-reuse", "connection", check_connection_reuse),
        Check("tls-no-resumption", "connection", check_tls_resumption),
        Check("http2-not-negotiated", "connection", check_http2),
        Check("response-cached", "caching", check_response_cached),
        Check("trace-context-dropped", "tracecontext", check_trace_context),
        Check("request-header-bloat", "headers", check_header_bloat),
        Check("slow-request-parsing", "parsing", check_request_parsing),
        Check("multimodal-preprocessing", "multimodal", check_multimodal_preprocessing),
        Check("queue-head-of-line", "queueing", check_queue_head_of_line),
        Check("batching-window", "batching", check_batching_window),
        Check("prefill-superlinear", "prefill", check_prefill_superlinear),
        Check("prefix-cache-miss", "prefixcache", check_prefix_cache_miss),
        Check("capacity-saturation", "saturation", check_capacity_saturation),
        Check("kv-cache-pressure", "kvcache", check_kv_cache_pressure),
        Check("decode-host-overhead", "sampling", check_decode_host_overhead),
        Check("stream-coalescing-nagle", "streaming", check_nagle),
        Check("stream-proxy-buffering", "streaming", check_proxy_buffering),
        Check("gateway-queueing", "gateway", check_gateway_queueing),
        Check("gateway-overhead", "overhead", check_gateway_overhead),
        Check("rate-limited", "ratelimit", check_rate_limited),
    )
}


def register(check: Check) -> None:
    """Add (or replace) a check in the registry."""
    CHECKS[check.id] = check


__all__ = ["CHECKS", "Check", "CheckFunction", "register"]
