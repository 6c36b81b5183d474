"""vLLM (server-signals.md, "vLLM"; vllm/v1/metrics/loggers.py). Histograms in seconds; labels ``model_name``,
``engine`` (one series per engine core under data parallelism: sums are over engines, KV usage is their mean).

Renamed metrics are listed newest first: ``inter_token_latency_seconds`` (older ``time_per_output_token_seconds``,
which measured the same gaps), ``kv_cache_usage_perc`` (older ``gpu_cache_usage_perc``; both 0–1 despite the name),
``prefix_cache_{hits,queries}`` (older ``gpu_prefix_cache_*``). Prefix-cache hits are counted in tokens, so they are
also the cached prompt tokens.
"""

from __future__ import annotations

from latscope.signals.windowstats import EngineMetrics

METRICS = EngineMetrics(
    family="vllm",
    detect_prefixes=("vllm:",),
    finished=("vllm:request_success",),
    finished_reason_label="finished_reason",
    queue=("vllm:request_queue_time_seconds",),
    prefill=("vllm:request_prefill_time_seconds",),
    decode=("vllm:request_decode_time_seconds",),
    inference=("vllm:request_inference_time_seconds",),
    ttft=("vllm:time_to_first_token_seconds",),
    e2e=("vllm:e2e_request_latency_seconds",),
    itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    tpot=("vllm:request_time_per_output_token_seconds",),
    waiting=("vllm:num_requests_waiting",),
    running=("vllm:num_requests_running",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    tokens_per_step=("vllm:iteration_tokens_total",),
    preemptions=("vllm:num_preemptions",),
    prompt_tokens=("vllm:prompt_tokens",),
    generation_tokens=("vllm:generation_tokens",),
    cached_prompt_tokens=("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    prefix_cache_hits=("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    prefix_cache_queries=("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
)
