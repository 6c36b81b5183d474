"""The check registry covers the finding ids diagnose decides, each with a catalogued title and fix."""

from __future__ import annotations

from latscope.checks import CHECKS
from latscope.findings import CATALOGUE


def test_every_headline_bottleneck_has_a_check_of_a_known_family() -> None:
    assert set(CHECKS) == {
        "slow-dns",
        "no-connection-reuse",
        "tls-no-resumption",
        "http2-not-negotiated",
        "response-cached",
        "trace-context-dropped",
        "request-header-bloat",
        "slow-request-parsing",
        "multimodal-preprocessing",
        "queue-head-of-line",
        "stream-coalescing-nagle",
        "stream-proxy-buffering",
        "batching-window",
        "prefill-superlinear",
        "prefix-cache-miss",
        "capacity-saturation",
        "kv-cache-pressure",
        "decode-host-overhead",
        "rate-limited",
        "gateway-queueing",
        "gateway-overhead",
    }
    assert all(c.id in CATALOGUE for c in CHECKS.values())
    assert {c.family for c in CHECKS.values()} == {
        "connection",
        "caching",
        "tracecontext",
        "headers",
        "parsing",
        "multimodal",
        "queueing",
        "batching",
        "prefill",
        "prefixcache",
        "saturation",
        "kvcache",
        "sampling",
        "streaming",
        "gateway",
        "overhead",
        "ratelimit",
    }
