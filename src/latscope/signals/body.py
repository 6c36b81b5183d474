"""Server timings carried in response bodies (a non-streaming JSON response, or the final stream chunk).

Each server uses its own unit; everything here is converted to milliseconds in :class:`ServerMeasure` and the raw
fields are kept in typed records (server-signals.md):

=====================  ==============================  ==========  ============================================
server                 field                           unit        measure
=====================  ==============================  ==========  ============================================
llama.cpp              ``timings.prompt_ms``           ms (float)  ``prefill``
llama.cpp              ``timings.predicted_ms``        ms (float)  ``decode``
Ollama (native API)    ``total_duration``              ns (int)    ``e2e``
Ollama                 ``load_duration``               ns          ``load`` (scheduler wait + model load)
Ollama                 ``prompt_eval_duration``        ns          ``prefill``
Ollama                 ``eval_duration``               ns          ``decode``
Ollama (derived)       total − load − prompt − eval    ns          ``slot_wait_templating``
SGLang native          ``meta_info.e2e_latency``       s (float)   ``e2e``
vLLM                   ``metrics.queue_time_ms``       ms (float)  ``queue`` (arrival → scheduled)
vLLM                   ``metrics.time_to_first_token_  ms (float)  ``prefill`` (scheduled → first token: vLLM's
                       ms``                                        TTFT starts at scheduling, not at arrival)
vLLM                   ``metrics.generation_time_ms``  ms (float)  ``decode`` (first → last token)
latscope lab           ``latscope.<phase>_ms``         ms          ``queue``, ``parse``, ``validate``, ``prefill``,
                                                                   ``decode``, ``window_wait`` (any ``*_ms`` key)
=====================  ==============================  ==========  ============================================

Values that are not non-negative numbers are ignored with a warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from latscope.signals.headers import warn
from latscope.timeline.model import VLLM_METRICS_KEYS, ServerMeasure, ServerPhase, Usage
from latscope.units import NS_PER_MS

MS_PER_S = 1000.0

OLLAMA_DURATION_FIELDS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")
OLLAMA_COUNT_FIELDS = ("prompt_eval_count", "eval_count")


def _number(obj: Mapping[str, Any], key: str, where: str, warnings: list[str] | None) -> float | None:
    """``obj[key]`` as a finite non-negative number; None (with a warning) when present but not one."""
    if key not in obj or obj[key] is None:
        return None
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        warn(warnings, f"body: {where}{key}={value!r} is not a non-negative number; ignored")
        return None
    return float(value)


def _integer(obj: Mapping[str, Any], key: str, where: str, warnings: list[str] | None) -> int | None:
    value = _number(obj, key, where, warnings)
    if value is None:
        return None
    if not value.is_integer():
        warn(warnings, f"body: {where}{key}={obj[key]!r} is not an integer; ignored")
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class LlamaCppTimings:
    """llama.cpp's ``timings`` object (tools/server/server-task.cpp). Durations in ms, rates in tokens/s."""

    cache_n: int | None = None  #: prompt tokens reused from the KV cache
    prompt_n: int | None = None  #: prompt tokens evaluated (excluding cached ones)
    prompt_ms: float | None = None  #: prefill time
    prompt_per_token_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_n: int | None = None  #: tokens generated
    predicted_ms: float | None = None  #: decode time
    predicted_per_token_ms: float | None = None
    predicted_per_second: float | None = None


def parse_llamacpp_timings(obj: Mapping[str, Any], *, warnings: list[str] | None = None) -> LlamaCppTimings:
    """Read a ``timings`` object; unreadable fields are None (with a warning)."""
    w = "timings."
    return LlamaCppTimings(
        cache_n=_integer(obj, "cache_n", w, warnings),
        prompt_n=_integer(obj, "prompt_n", w, warnings),
        prompt_ms=_number(obj, "prompt_ms", w, warnings),
        prompt_per_token_ms=_number(obj, "prompt_per_token_ms", w, warnings),
        prompt_per_second=_number(obj, "prompt_per_second", w, warnings),
        predicted_n=_integer(obj, "predicted_n", w, warnings),
        predicted_ms=_number(obj, "predicted_ms", w, warnings),
        predicted_per_token_ms=_number(obj, "predicted_per_token_ms", w, warnings),
        predicted_per_second=_number(obj, "predicted_per_second", w, warnings),
    )


def llamacpp_measures(timings: LlamaCppTimings) -> list[ServerMeasure]:
    """``prefill`` from ``prompt_ms`` and ``decode`` from ``predicted_ms``."""
    measures: list[ServerMeasure] = []
    if timings.prompt_ms is not None:
        measures.append(ServerMeasure(ServerPhase.PREFILL, timings.prompt_ms, "body:timings.prompt_ms"))
    if timings.predicted_ms is not None:
        measures.append(ServerMeasure(ServerPhase.DECODE, timings.predicted_ms, "body:timings.predicted_ms"))
    return measures


@dataclass(frozen=True, slots=True)
class OllamaDurations:
    """The final ``done: true`` message of Ollama's native API. Durations in NANOSECONDS, as Ollama sends them."""

    total_ns: int | None = None  #: ``total_duration``: the whole request inside Ollama
    load_ns: int | None = None  #: ``load_duration``: scheduler wait + model load
    prompt_eval_ns: int | None = None  #: ``prompt_eval_duration``: prefill
    eval_ns: int | None = None  #: ``eval_duration``: decode
    prompt_eval_count: int | None = None  #: prompt tokens evaluated
    eval_count: int | None = None  #: tokens generated

    @property
    def slot_wait_templating_ns(self) -> int | None:
        """total − load − prompt_eval − eval: what Ollama does not report separately (slot wait, templating)."""
        parts = (self.total_ns, self.load_ns, self.prompt_eval_ns, self.eval_ns)
        if any(part is None for part in parts):
            return None
        total, load, prompt_eval, eval_ = (part or 0 for part in parts)
        return total - load - prompt_eval - eval_


def is_ollama_final(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` carries any of Ollama's duration fields."""
    return any(key in obj for key in OLLAMA_DURATION_FIELDS)


def parse_ollama_durations(obj: Mapping[str, Any], *, warnings: list[str] | None = None) -> OllamaDurations:
    """Read the duration (ns) and count fields of an Ollama final message."""
    return OllamaDurations(
        total_ns=_integer(obj, "total_duration", "", warnings),
        load_ns=_integer(obj, "load_duration", "", warnings),
        prompt_eval_ns=_integer(obj, "prompt_eval_duration", "", warnings),
        eval_ns=_integer(obj, "eval_duration", "", warnings),
        prompt_eval_count=_integer(obj, "prompt_eval_count", "", warnings),
        eval_count=_integer(obj, "eval_count", "", warnings),
    )


def ollama_measures(durations: OllamaDurations, *, warnings: list[str] | None = None) -> list[ServerMeasure]:
    """``e2e``, ``load``, ``prefill``, ``decode`` and the derived ``slot_wait_templating``, in ms."""
    measures: list[ServerMeasure] = []
    for name, value, field_name in (
        (ServerPhase.E2E, durations.total_ns, "total_duration"),
        (ServerPhase.LOAD, durations.load_ns, "load_duration"),
        (ServerPhase.PREFILL, durations.prompt_eval_ns, "prompt_eval_duration"),
        (ServerPhase.DECODE, durations.eval_ns, "eval_duration"),
    ):
        if value is not None:
            measures.append(ServerMeasure(name, value / NS_PER_MS, f"body:{field_name}"))
    other = durations.slot_wait_templating_ns
    if other is not None:
        if other < 0:
            warn(
                warnings,
                f"body: Ollama durations add up to more than total_duration (by {-other} ns); slot wait not derived",
            )
        else:
            source = "body:total_duration-load_duration-prompt_eval_duration-eval_duration"
            measures.append(ServerMeasure(ServerPhase.SLOT_WAIT_TEMPLATING, other / NS_PER_MS, source))
    return measures


def sglang_measures(meta_info: Mapping[str, Any], *, warnings: list[str] | None = None) -> list[ServerMeasure]:
    """``e2e`` from SGLang's ``meta_info.e2e_latency`` (seconds)."""
    e2e_s = _number(meta_info, "e2e_latency", "meta_info.", warnings)
    return [] if e2e_s is None else [ServerMeasure(ServerPhase.E2E, e2e_s * MS_PER_S, "body:meta_info.e2e_latency")]


@dataclass(frozen=True, slots=True)
class VllmRequestMetrics:
    """vLLM's own account of one request (``--enable-per-request-metrics``), in ms, from its engine's timestamps."""

    queue_ms: float | None = None  #: ``queue_time_ms``: arrival in the engine → scheduled
    ttft_ms: float | None = None  #: ``time_to_first_token_ms``: scheduled → first token (not from arrival)
    generation_ms: float | None = None  #: ``generation_time_ms``: first → last token
    mean_itl_ms: float | None = None  #: ``mean_itl_ms``: generation over (tokens − 1)
    tokens_per_second: float | None = None  #: tokens over scheduled → last token


def is_vllm_metrics(obj: object) -> TypeGuard[Mapping[str, Any]]:
    """True when ``obj`` is vLLM's per-request ``metrics`` object (a mapping with one of its fields)."""
    return isinstance(obj, Mapping) and any(key in obj for key in VLLM_METRICS_KEYS)


def parse_vllm_metrics(obj: Mapping[str, Any], *, warnings: list[str] | None = None) -> VllmRequestMetrics:
    """Read vLLM's per-request ``metrics`` object; unreadable fields are None (with a warning)."""
    w = "metrics."
    return VllmRequestMetrics(
        queue_ms=_number(obj, "queue_time_ms", w, warnings),
        ttft_ms=_number(obj, "time_to_first_token_ms", w, warnings),
        generation_ms=_number(obj, "generation_time_ms", w, warnings),
        mean_itl_ms=_number(obj, "mean_itl_ms", w, warnings),
        tokens_per_second=_number(obj, "tokens_per_second", w, warnings),
    )


def vllm_measures(metrics: VllmRequestMetrics) -> list[ServerMeasure]:
    """``queue``, ``prefill`` (vLLM's TTFT, which starts when the request was scheduled) and ``decode``."""
    measures: list[ServerMeasure] = []
    for name, value, field_name in (
        (ServerPhase.QUEUE, metrics.queue_ms, "queue_time_ms"),
        (ServerPhase.PREFILL, metrics.ttft_ms, "time_to_first_token_ms"),
        (ServerPhase.DECODE, metrics.generation_ms, "generation_time_ms"),
    ):
        if value is not None:
            measures.append(ServerMeasure(name, value, f"body:metrics.{field_name}"))
    return measures


LAB_PHASES = (
    ServerPhase.PARSE,
    ServerPhase.VALIDATE,
    ServerPhase.QUEUE,
    ServerPhase.WINDOW_WAIT,
    ServerPhase.PREFILL,
    ServerPhase.DECODE,
)


def lab_measures(latscope: Mapping[str, Any], *, warnings: list[str] | None = None) -> list[ServerMeasure]:
    """Every ``<phase>_ms`` field of the lab's ``latscope`` object, in ms, named after the phase.

    The lab reports ``queue_ms``, ``parse_ms``, ``validate_ms``, ``prefill_ms``, ``decode_ms`` and ``window_wait_ms``
    (time spent waiting for the batching window); other ``*_ms`` fields are kept under their own names.
    """
    measures: list[ServerMeasure] = []
    for key in latscope:
        if not key.endswith("_ms"):
            continue
        value = _number(latscope, key, "latscope.", warnings)
        if value is not None:
            measures.append(ServerMeasure(key[: -len("_ms")], value, f"body:latscope.{key}"))
    return measures


def looks_like_lab_object(obj: Mapping[str, Any]) -> bool:
    """True when ``obj`` is the lab's ``latscope`` object itself (it has one of the lab's ``<phase>_ms`` fields)."""
    return any(f"{phase}_ms" in obj for phase in LAB_PHASES)


def parse_usage(obj: Mapping[str, Any], *, warnings: list[str] | None = None) -> Usage | None:
    """An OpenAI-style ``usage`` object (with ``*_tokens_details``), or None when no field is readable."""
    prompt_details = obj.get("prompt_tokens_details")
    completion_details = obj.get("completion_tokens_details")
    usage = Usage(
        prompt_tokens=_integer(obj, "prompt_tokens", "usage.", warnings),
        completion_tokens=_integer(obj, "completion_tokens", "usage.", warnings),
        total_tokens=_integer(obj, "total_tokens", "usage.", warnings),
        cached_tokens=(
            _integer(prompt_details, "cached_tokens", "usage.prompt_tokens_details.", warnings)
            if isinstance(prompt_details, Mapping)
            else None
        ),
        reasoning_tokens=(
            _integer(completion_details, "reasoning_tokens", "usage.completion_tokens_details.", warnings)
            if isinstance(completion_details, Mapping)
            else None
        ),
    )
    return None if usage == Usage() else usage


def body_measures(body: Mapping[str, Any], *, warnings: list[str] | None = None) -> list[ServerMeasure]:
    """Every server measure found in one JSON object, whatever server sent it.

    Looks for llama.cpp's ``timings``, the lab's ``latscope`` object, SGLang's ``meta_info``, vLLM's per-request
    ``metrics`` and Ollama's top-level durations, in that order.
    """
    measures: list[ServerMeasure] = []
    timings = body.get("timings")
    if isinstance(timings, Mapping):
        measures += llamacpp_measures(parse_llamacpp_timings(timings, warnings=warnings))
    lab = body.get("latscope")
    if isinstance(lab, Mapping):
        measures += lab_measures(lab, warnings=warnings)
    meta_info = body.get("meta_info")
    if isinstance(meta_info, Mapping):
        measures += sglang_measures(meta_info, warnings=warnings)
    metrics = body.get("metrics")
    if is_vllm_metrics(metrics):
        measures += vllm_measures(parse_vllm_metrics(metrics, warnings=warnings))
    if is_ollama_final(body):
        measures += ollama_measures(parse_ollama_durations(body, warnings=warnings), warnings=warnings)
    return measures
