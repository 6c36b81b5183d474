"""The latscope lab's own ``/metrics`` (names fixed by the lab; histograms in seconds).

Histograms: ``latscope_lab_request_{queue,prefill,decode,parse}_seconds``, ``latscope_lab_time_to_first_token_seconds``,
``latscope_lab_e2e_request_latency_seconds`` and ``latscope_lab_iteration_tokens`` (tokens per engine step). Gauges:
``latscope_lab_requests_{running,waiting}``, ``latscope_lab_kv_cache_usage_ratio`` (0–1). Counters:
``latscope_lab_preemptions_total``, ``latscope_lab_{prompt,generation}_tokens_total`` and
``latscope_lab_requests_total{finished_reason}``.
"""

from __future__ import annotations

from latscope.signals.windowstats import EngineMetrics

METRICS = EngineMetrics(
    family="lab",
    detect_prefixes=("latscope_lab_",),
    finished=("latscope_lab_requests_total",),
    finished_reason_label="finished_reason",
    parse=("latscope_lab_request_parse_seconds",),
    queue=("latscope_lab_request_queue_seconds",),
    prefill=("latscope_lab_request_prefill_seconds",),
    decode=("latscope_lab_request_decode_seconds",),
    ttft=("latscope_lab_time_to_first_token_seconds",),
    e2e=("latscope_lab_e2e_request_latency_seconds",),
    waiting=("latscope_lab_requests_waiting",),
    running=("latscope_lab_requests_running",),
    kv_usage=("latscope_lab_kv_cache_usage_ratio",),
    tokens_per_step=("latscope_lab_iteration_tokens",),
    preemptions=("latscope_lab_preemptions_total",),
    prompt_tokens=("latscope_lab_prompt_tokens_total",),
    generation_tokens=("latscope_lab_generation_tokens_total",),
)
