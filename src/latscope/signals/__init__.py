"""Server-side evidence about requests: what servers report in headers, bodies and Prometheus metrics.

Everything here is sans-IO: header pairs, decoded JSON objects and exposition text in; typed records out. Malformed
values never raise: they are skipped, and a message is appended to the ``warnings`` list a caller passes.

Modules, by what they hold:

* :mod:`~latscope.signals.servertiming` — W3C Server-Timing (headers and trailers).
* :mod:`~latscope.signals.timingheaders` — TGI, OpenAI and Envoy timing headers.
* :mod:`~latscope.signals.requestid` — the server's request id.
* :mod:`~latscope.signals.ratelimit` — OpenAI, Anthropic, IETF and X-RateLimit headers, Retry-After.
* :mod:`~latscope.signals.cache` — HTTP cache indicators.
* :mod:`~latscope.signals.tracecontext` — W3C traceparent / tracestate.
* :mod:`~latscope.signals.structured` — RFC 8941 structured fields (used by the IETF headers).
* :mod:`~latscope.signals.body` — llama.cpp ``timings``, Ollama durations, SGLang ``meta_info``, the lab's object.
* :mod:`~latscope.signals.join` — all of the above onto a Timeline, and the TTFT split.
* :mod:`~latscope.signals.prometheus` — exposition text → snapshots, deltas, histogram quantiles.
* :mod:`~latscope.signals.windowstats`, :mod:`~latscope.signals.engines` — per-server adapters → ServerWindowStats.
"""

from latscope.signals.body import (
    LlamaCppTimings,
    OllamaDurations,
    body_measures,
    parse_llamacpp_timings,
    parse_ollama_durations,
    parse_usage,
)
from latscope.signals.cache import CacheSignal, cache_state
from latscope.signals.engines import detect_family, register_adapter, window_stats
from latscope.signals.join import TtftPart, TtftSplit, apply_server_signals, server_measures, ttft_split
from latscope.signals.prometheus import Family, Histogram, Sample, Snapshot, delta, histogram_quantile, parse_exposition
from latscope.signals.ratelimit import RateLimitState, RateLimitWindow, rate_limit_state
from latscope.signals.requestid import RequestId, request_id, request_ids
from latscope.signals.scrape import Fetch, MetricsScraper, MetricsWindow, NotAvailable, metrics_url_for, scrape_once
from latscope.signals.servertiming import ServerTimingMetric, format_server_timing, parse_server_timing
from latscope.signals.timingheaders import tgi_token_counts, timing_header_measures
from latscope.signals.tracecontext import TraceParent, new_traceparent, parse_traceparent, parse_tracestate
from latscope.signals.windowstats import EngineMetrics, GaugeStats, ServerWindowStats

__all__ = [
    "CacheSignal",
    "EngineMetrics",
    "Family",
    "Fetch",
    "GaugeStats",
    "Histogram",
    "LlamaCppTimings",
    "MetricsScraper",
    "MetricsWindow",
    "NotAvailable",
    "OllamaDurations",
    "RateLimitState",
    "RateLimitWindow",
    "RequestId",
    "Sample",
    "ServerTimingMetric",
    "ServerWindowStats",
    "Snapshot",
    "TraceParent",
    "TtftPart",
    "TtftSplit",
    "apply_server_signals",
    "body_measures",
    "cache_state",
    "delta",
    "detect_family",
    "format_server_timing",
    "histogram_quantile",
    "metrics_url_for",
    "new_traceparent",
    "parse_exposition",
    "parse_llamacpp_timings",
    "parse_ollama_durations",
    "parse_server_timing",
    "parse_traceparent",
    "parse_tracestate",
    "parse_usage",
    "rate_limit_state",
    "register_adapter",
    "request_id",
    "request_ids",
    "scrape_once",
    "server_measures",
    "tgi_token_counts",
    "timing_header_measures",
    "ttft_split",
    "window_stats",
]
