"""What a server's Prometheus metrics say about a time window, normalised across server families.

Prometheus histograms aggregate every request, so a single request's timing can be isolated only from
``_sum`` / ``_count`` deltas around it when nothing else runs; otherwise these are the server's state over the window
(server-signals.md). :class:`ServerWindowStats` is that state in one vocabulary, whatever the server; the per-family
name tables and quirks live in :mod:`latscope.signals.engines`.

:func:`stats_from_names` computes every field the generic way from an :class:`EngineMetrics` name table:

* per-request means (ms) = Δ``<histogram>_sum`` ÷ Δ``<histogram>_count`` × ``seconds_to_ms``;
* counters (requests, tokens, preemptions) = their increase over the window;
* gauges (waiting, running, KV-cache usage) = last / mean / max over the snapshots taken in the window;
* mean tokens per engine step = Δsum ÷ Δcount of the iteration-tokens histogram (the batch-size signal).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from latscope.signals.prometheus import Aggregation, Snapshot

MS_PER_S = 1000.0


@dataclass(frozen=True, slots=True)
class GaugeStats:
    """A gauge over the window's snapshots (its own unit: requests, or a 0–1 ratio for KV usage)."""

    last: float  #: the value in the last snapshot that had it
    mean: float  #: mean over the snapshots that had it
    max: float
    samples: int  #: how many snapshots had it
    #: ``(taken_at_s, value)`` of each snapshot that had it and was stamped, in order: the gauge over time (carried
    #: beside the statistics, which are what two stats compare by)
    points: tuple[tuple[float, float], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class ServerWindowStats:
    """One server's view of a window, from Prometheus deltas. Times in ms; None where the server has no metric.

    Means are per finished request (``mean_*_ms``) except ``mean_itl_ms`` (per inter-token gap) and
    ``mean_tpot_ms`` (per request, the server's own time-per-output-token). ``total_prefill_ms`` /
    ``total_decode_ms`` are engine time spent in each phase over the window, summed over requests or batches.
    ``mean_api_overhead_ms`` is ``mean_ttft − mean_queue − mean_prefill``: for servers whose TTFT starts at the API
    front end and whose queue/prefill come from the engine (vLLM, the lab) it approximates tokenising and
    inter-process hops; approximate because the three means are over slightly different sets of requests.
    ``sources`` maps each filled field to the metric it came from, so a finding can cite it.
    """

    family: str  #: "vllm", "sglang", "tgi", "llamacpp", "triton" or "lab"
    interval_s: float | None = None  #: time between the two scrapes, when their times were given
    requests_finished: float | None = None
    finished_by_reason: Mapping[str, float] = field(default_factory=dict)
    mean_parse_ms: float | None = None
    mean_validate_ms: float | None = None
    mean_queue_ms: float | None = None
    mean_prefill_ms: float | None = None
    mean_decode_ms: float | None = None
    mean_inference_ms: float | None = None  #: prefill + decode (first scheduled → last token)
    mean_ttft_ms: float | None = None
    mean_e2e_ms: float | None = None
    mean_itl_ms: float | None = None
    mean_tpot_ms: float | None = None
    mean_api_overhead_ms: float | None = None
    total_prefill_ms: float | None = None
    total_decode_ms: float | None = None
    waiting: GaugeStats | None = None  #: requests queued in the server
    running: GaugeStats | None = None  #: requests being processed
    kv_usage: GaugeStats | None = None  #: KV-cache usage, 0–1
    mean_tokens_per_step: float | None = None  #: tokens processed per engine step (batch-size signal)
    mean_batch_size: float | None = None  #: requests per engine execution
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    cached_prompt_tokens: float | None = None
    prefix_cache_hit_ratio: float | None = None  #: cached ÷ looked-up prompt tokens over the window, 0–1
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """The metric names one server family uses for each statistic.

    Each entry is a tuple of candidate names, newest first: the first name the server exposes wins (so renamed
    metrics such as vLLM's ``kv_cache_usage_perc`` / ``gpu_cache_usage_perc`` are both understood). Histogram names
    are given without ``_sum`` / ``_count`` / ``_bucket``; counters with or without ``_total``; a counter entry may
    also name a histogram's ``_sum`` sample (token totals from a token histogram).
    """

    family: str
    detect_prefixes: tuple[str, ...]
    finished: tuple[str, ...] = ()
    finished_reason_label: str | None = None
    parse: tuple[str, ...] = ()
    validate: tuple[str, ...] = ()
    queue: tuple[str, ...] = ()
    prefill: tuple[str, ...] = ()
    decode: tuple[str, ...] = ()
    inference: tuple[str, ...] = ()
    ttft: tuple[str, ...] = ()
    e2e: tuple[str, ...] = ()
    itl: tuple[str, ...] = ()
    tpot: tuple[str, ...] = ()
    seconds_to_ms: float = MS_PER_S  #: factor from the histograms' unit to ms
    waiting: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    kv_usage_scale: float = 1.0  #: factor to a 0–1 ratio
    tokens_per_step: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    generation_tokens: tuple[str, ...] = ()
    cached_prompt_tokens: tuple[str, ...] = ()
    prefix_cache_hits: tuple[str, ...] = ()
    prefix_cache_queries: tuple[str, ...] = ()


Adapter = Callable[[Snapshot, Sequence[Snapshot]], ServerWindowStats]
"""An adapter turns a delta (see :func:`~latscope.signals.prometheus.delta`) and the window's snapshots into stats."""


def first_present(snapshot: Snapshot, candidates: Sequence[str], suffix: str = "") -> str | None:
    """The first candidate name whose ``<name><suffix>`` series exists in ``snapshot``."""
    for name in candidates:
        if snapshot.series(name + suffix):
            return name
    return None


def gauge_stats(
    snapshots: Sequence[Snapshot],
    candidates: Sequence[str],
    *,
    aggregate: Aggregation = "sum",
    scale: float = 1.0,
) -> tuple[GaugeStats | None, str | None]:
    """Statistics of the first candidate gauge present in any snapshot, aggregated over its label sets."""
    for name in candidates:
        stamped = [
            (snapshot.taken_at_s, value * scale)
            for snapshot in snapshots
            if (value := snapshot.value(name, aggregate=aggregate)) is not None
        ]
        values = [value for _, value in stamped]
        if values:
            points = tuple((at, value) for at, value in stamped if at is not None)
            return GaugeStats(values[-1], math.fsum(values) / len(values), max(values), len(values), points), name
    return None, None


def _window_values(names: EngineMetrics, window: Snapshot) -> tuple[dict[str, float], dict[str, str]]:
    """The histogram and counter statistics the name table allows over the window, by field name, and the metric
    (or formula) each came from."""
    sources: dict[str, str] = {}
    found: dict[str, float] = {}

    def take(field_name: str, candidates: Sequence[str], *, mean: bool, factor: float | None) -> None:
        """The first candidate present: a histogram's mean (``mean``) or a counter's increase, times ``factor``."""
        name = first_present(window, candidates, "_count" if mean else "")
        value = None if name is None else window.mean(name) if mean else window.value(name)
        if name is not None and value is not None:
            found[field_name] = value if factor is None else value * factor
            sources[field_name] = name

    for field_name, candidates in (
        ("mean_parse_ms", names.parse),
        ("mean_validate_ms", names.validate),
        ("mean_queue_ms", names.queue),
        ("mean_prefill_ms", names.prefill),
        ("mean_decode_ms", names.decode),
        ("mean_inference_ms", names.inference),
        ("mean_ttft_ms", names.ttft),
        ("mean_e2e_ms", names.e2e),
        ("mean_itl_ms", names.itl),
        ("mean_tpot_ms", names.tpot),
    ):
        take(field_name, candidates, mean=True, factor=names.seconds_to_ms)
    for field_name, candidates in (
        ("requests_finished", names.finished),
        ("preemptions", names.preemptions),
        ("prompt_tokens", names.prompt_tokens),
        ("generation_tokens", names.generation_tokens),
        ("cached_prompt_tokens", names.cached_prompt_tokens),
    ):
        take(field_name, candidates, mean=False, factor=None)
    # Engine time per phase over the window: the phase histograms' sums.
    for field_name, mean_field in (("total_prefill_ms", "mean_prefill_ms"), ("total_decode_ms", "mean_decode_ms")):
        if mean_field in sources:
            take(field_name, [f"{sources[mean_field]}_sum"], mean=False, factor=names.seconds_to_ms)
    take("mean_tokens_per_step", names.tokens_per_step, mean=True, factor=None)
    hits_name = first_present(window, names.prefix_cache_hits)
    queries_name = first_present(window, names.prefix_cache_queries)
    hits = None if hits_name is None else window.value(hits_name)
    queries = None if queries_name is None else window.value(queries_name)
    if hits is not None and queries:
        found["prefix_cache_hit_ratio"] = hits / queries
        sources["prefix_cache_hit_ratio"] = f"{hits_name} / {queries_name}"
    if all(key in found for key in ("mean_ttft_ms", "mean_queue_ms", "mean_prefill_ms")):
        found["mean_api_overhead_ms"] = found["mean_ttft_ms"] - found["mean_queue_ms"] - found["mean_prefill_ms"]
        sources["mean_api_overhead_ms"] = "mean_ttft_ms - mean_queue_ms - mean_prefill_ms"
    return found, sources


def stats_from_names(names: EngineMetrics, window: Snapshot, gauges: Sequence[Snapshot]) -> ServerWindowStats:
    """Compute every statistic the name table allows (see the module docstring)."""
    found, sources = _window_values(names, window)
    waiting, waiting_name = gauge_stats(gauges, names.waiting, aggregate="sum")
    running, running_name = gauge_stats(gauges, names.running, aggregate="sum")
    kv_usage, kv_name = gauge_stats(gauges, names.kv_usage, aggregate="mean", scale=names.kv_usage_scale)
    for field_name, gauge_name in (("waiting", waiting_name), ("running", running_name), ("kv_usage", kv_name)):
        if gauge_name is not None:
            sources[field_name] = gauge_name
    by_reason: dict[str, float] = {}
    if "requests_finished" in sources and names.finished_reason_label:
        by_reason = window.by_label(sources["requests_finished"], names.finished_reason_label)
    return ServerWindowStats(
        family=names.family,
        interval_s=window.interval_s,
        requests_finished=found.get("requests_finished"),
        finished_by_reason=by_reason,
        mean_parse_ms=found.get("mean_parse_ms"),
        mean_validate_ms=found.get("mean_validate_ms"),
        mean_queue_ms=found.get("mean_queue_ms"),
        mean_prefill_ms=found.get("mean_prefill_ms"),
        mean_decode_ms=found.get("mean_decode_ms"),
        mean_inference_ms=found.get("mean_inference_ms"),
        mean_ttft_ms=found.get("mean_ttft_ms"),
        mean_e2e_ms=found.get("mean_e2e_ms"),
        mean_itl_ms=found.get("mean_itl_ms"),
        mean_tpot_ms=found.get("mean_tpot_ms"),
        mean_api_overhead_ms=found.get("mean_api_overhead_ms"),
        total_prefill_ms=found.get("total_prefill_ms"),
        total_decode_ms=found.get("total_decode_ms"),
        waiting=waiting,
        running=running,
        kv_usage=kv_usage,
        mean_tokens_per_step=found.get("mean_tokens_per_step"),
        preemptions=found.get("preemptions"),
        prompt_tokens=found.get("prompt_tokens"),
        generation_tokens=found.get("generation_tokens"),
        cached_prompt_tokens=found.get("cached_prompt_tokens"),
        prefix_cache_hit_ratio=found.get("prefix_cache_hit_ratio"),
        sources=sources,
    )


def gauge_series(stats: ServerWindowStats, origin_s: float) -> list[tuple[float, float, float | None, float | None]]:
    """The window's gauges over time, one row per scrape that had the running-requests gauge: ``(seconds since
    origin_s, running, waiting, kv_usage)`` (None where that scrape had no such gauge; empty without running)."""
    if stats.running is None:
        return []
    waiting = {} if stats.waiting is None else dict(stats.waiting.points)
    kv = {} if stats.kv_usage is None else dict(stats.kv_usage.points)
    return [(round(at - origin_s, 3), running, waiting.get(at), kv.get(at)) for at, running in stats.running.points]
