"""Hugging Face TGI (server-signals.md, "Hugging Face TGI"; router/src/server.rs, backends/v3).

Histograms in seconds, written by the Rust ``metrics-exporter-prometheus`` crate (counters without ``_total``).
Per request: ``tgi_request_duration`` (e2e), ``_validation_duration``, ``_queue_duration``, ``_inference_duration``
(prefill + decode) and ``_mean_time_per_token_duration`` (inference ÷ generated tokens). Prefill and decode are
timed per *batch* (``tgi_batch_inference_duration{method="prefill|decode"}``), so they give engine time per phase
over the window, not per-request means. Token totals are the sums of the per-request token histograms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from latscope.signals.prometheus import Snapshot
from latscope.signals.windowstats import MS_PER_S, EngineMetrics, ServerWindowStats, stats_from_names

METRICS = EngineMetrics(
    family="tgi",
    detect_prefixes=("tgi_",),
    finished=("tgi_request_success",),
    validate=("tgi_request_validation_duration",),
    queue=("tgi_request_queue_duration",),
    inference=("tgi_request_inference_duration",),
    e2e=("tgi_request_duration",),
    tpot=("tgi_request_mean_time_per_token_duration",),
    waiting=("tgi_queue_size",),
    running=("tgi_batch_current_size",),
    prompt_tokens=("tgi_request_input_length_sum",),
    generation_tokens=("tgi_request_generated_tokens_sum",),
)
BATCH_PHASE_HISTOGRAM = "tgi_batch_inference_duration"


def window_stats(window: Snapshot, gauges: Sequence[Snapshot]) -> ServerWindowStats:
    """Stats from a TGI delta and the window's snapshots, with batch-level prefill/decode engine time."""
    stats = stats_from_names(METRICS, window, gauges)
    sources = dict(stats.sources)
    totals: dict[str, float | None] = {}
    for field_name, method in (("total_prefill_ms", "prefill"), ("total_decode_ms", "decode")):
        seconds = window.value(f"{BATCH_PHASE_HISTOGRAM}_sum", {"method": method})
        totals[field_name] = None if seconds is None else seconds * MS_PER_S
        if seconds is not None:
            sources[field_name] = f'{BATCH_PHASE_HISTOGRAM}_sum{{method="{method}"}}'
    return dataclasses.replace(
        stats, total_prefill_ms=totals["total_prefill_ms"], total_decode_ms=totals["total_decode_ms"], sources=sources
    )
