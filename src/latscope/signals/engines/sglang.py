"""SGLang with ``--enable-metrics`` (server-signals.md, "SGLang"; python/sglang/srt/metrics/collector.py).

Histograms in seconds. ``queue_time_seconds`` is forward start − wait-queue entry; there is no per-request prefill
or decode histogram. ``token_usage`` is the KV pool's used fraction (0–1). SGLang's ``prompt_tokens_total`` counts
whole prompts and ``cached_tokens_total`` their cached part, so their ratio is the prefix-cache hit ratio.
"""

from __future__ import annotations

from latscope.signals.windowstats import EngineMetrics

METRICS = EngineMetrics(
    family="sglang",
    detect_prefixes=("sglang:",),
    finished=("sglang:num_requests_total",),
    queue=("sglang:queue_time_seconds",),
    ttft=("sglang:time_to_first_token_seconds",),
    e2e=("sglang:e2e_request_latency_seconds",),
    itl=("sglang:inter_token_latency_seconds",),
    waiting=("sglang:num_queue_reqs",),
    running=("sglang:num_running_reqs",),
    kv_usage=("sglang:token_usage",),
    prompt_tokens=("sglang:prompt_tokens_total",),
    generation_tokens=("sglang:generation_tokens_total",),
    cached_prompt_tokens=("sglang:cached_tokens_total",),
    prefix_cache_hits=("sglang:cached_tokens_total",),
    prefix_cache_queries=("sglang:prompt_tokens_total",),
)
