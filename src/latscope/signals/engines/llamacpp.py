"""llama.cpp ``llama-server --metrics`` (server-signals.md, "llama.cpp server"; tools/server/server.cpp).

No histograms: ``prompt_seconds_total`` and ``tokens_predicted_seconds_total`` are counters of engine time (seconds)
spent in prefill and decode, so the window gives total engine time per phase, not per-request means (there is no
request counter to divide by). There is no queue histogram: ``requests_deferred`` is the queue (a gauge) and
``requests_processing`` the running requests. Tokens per engine step = (Δprompt tokens + Δpredicted tokens) ÷
Δ``n_decode_total`` (llama_decode() calls). ``n_busy_slots_per_decode`` is the server's lifetime average of busy
slots per decode call: reported as ``mean_batch_size`` from the last snapshot, which is not window-specific.
Older builds also exposed ``kv_cache_usage_ratio``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from latscope.signals.prometheus import Snapshot
from latscope.signals.windowstats import MS_PER_S, EngineMetrics, ServerWindowStats, stats_from_names

METRICS = EngineMetrics(
    family="llamacpp",
    detect_prefixes=("llamacpp:",),
    waiting=("llamacpp:requests_deferred",),
    running=("llamacpp:requests_processing",),
    kv_usage=("llamacpp:kv_cache_usage_ratio",),
    prompt_tokens=("llamacpp:prompt_tokens_total",),
    generation_tokens=("llamacpp:tokens_predicted_total",),
    cached_prompt_tokens=("llamacpp:prompt_tokens_cached_total",),
)


def window_stats(window: Snapshot, gauges: Sequence[Snapshot]) -> ServerWindowStats:
    """Stats from a llama.cpp delta and the window's snapshots."""
    stats = stats_from_names(METRICS, window, gauges)
    sources = dict(stats.sources)
    prefill_s = window.value("llamacpp:prompt_seconds_total")
    decode_s = window.value("llamacpp:tokens_predicted_seconds_total")
    if prefill_s is not None:
        sources["total_prefill_ms"] = "llamacpp:prompt_seconds_total"
    if decode_s is not None:
        sources["total_decode_ms"] = "llamacpp:tokens_predicted_seconds_total"
    decodes = window.value("llamacpp:n_decode_total")
    tokens_per_step = None
    if decodes and stats.prompt_tokens is not None and stats.generation_tokens is not None:
        tokens_per_step = (stats.prompt_tokens + stats.generation_tokens) / decodes
        sources["mean_tokens_per_step"] = (
            "(llamacpp:prompt_tokens_total + llamacpp:tokens_predicted_total) / llamacpp:n_decode_total"
        )
    busy_slots = next(
        (value for snap in reversed(gauges) if (value := snap.value("llamacpp:n_busy_slots_per_decode")) is not None),
        None,
    )
    if busy_slots is not None:
        sources["mean_batch_size"] = "llamacpp:n_busy_slots_per_decode (lifetime average)"
    return dataclasses.replace(
        stats,
        total_prefill_ms=None if prefill_s is None else prefill_s * MS_PER_S,
        total_decode_ms=None if decode_s is None else decode_s * MS_PER_S,
        mean_tokens_per_step=tokens_per_step,
        mean_batch_size=busy_slots,
        sources=sources,
    )
