"""NVIDIA Triton / TensorRT-LLM (server-signals.md, "NVIDIA Triton / TensorRT-LLM"; metrics port 8002).

Triton's durations are cumulative MICROSECOND counters summed over requests (``nv_inference_request_duration_us``,
``nv_inference_queue_duration_us``, ``nv_inference_compute_infer_duration_us`` …), so a per-request mean is
Δduration ÷ Δ``nv_inference_request_success``. The average batch is Δ``nv_inference_count`` (inferences) ÷
Δ``nv_inference_exec_count`` (model executions). ``nv_inference_pending_request_count`` is the queue. The
``trtllm_*`` names of trtllm-serve (waiting, running, KV utilisation, TTFT in seconds) are read when present; they
are partly unverified upstream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from latscope.signals.prometheus import Snapshot
from latscope.signals.windowstats import EngineMetrics, ServerWindowStats, stats_from_names

US_PER_MS = 1000.0

METRICS = EngineMetrics(
    family="triton",
    detect_prefixes=("nv_inference_", "trtllm_"),
    finished=("nv_inference_request_success",),
    ttft=("trtllm_time_to_first_token_seconds",),
    waiting=("trtllm_num_requests_waiting", "nv_inference_pending_request_count"),
    running=("trtllm_num_requests_running",),
    kv_usage=("trtllm_kv_cache_utilization",),
)

# (stats field, cumulative µs counter)
_DURATION_COUNTERS = (
    ("mean_queue_ms", "nv_inference_queue_duration_us"),
    ("mean_inference_ms", "nv_inference_compute_infer_duration_us"),
    ("mean_e2e_ms", "nv_inference_request_duration_us"),
)


def window_stats(window: Snapshot, gauges: Sequence[Snapshot]) -> ServerWindowStats:
    """Stats from a Triton delta and the window's snapshots."""
    stats = stats_from_names(METRICS, window, gauges)
    sources = dict(stats.sources)
    means: dict[str, float | None] = {}
    for field_name, counter in _DURATION_COUNTERS:
        total_us = window.value(counter)
        means[field_name] = None
        if total_us is not None and stats.requests_finished:
            means[field_name] = total_us / stats.requests_finished / US_PER_MS
            sources[field_name] = f"{counter} / nv_inference_request_success"
    inferences = window.value("nv_inference_count")
    executions = window.value("nv_inference_exec_count")
    batch = None
    if inferences is not None and executions:
        batch = inferences / executions
        sources["mean_batch_size"] = "nv_inference_count / nv_inference_exec_count"
    return dataclasses.replace(
        stats,
        mean_queue_ms=means["mean_queue_ms"],
        mean_inference_ms=means["mean_inference_ms"],
        mean_e2e_ms=means["mean_e2e_ms"],
        mean_batch_size=batch,
        sources=sources,
    )
