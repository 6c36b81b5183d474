"""What the lab reports about each request, in the formats clients already read.

- ``Server-Timing`` (W3C): ``parse;dur=X, validate;dur=Y, queue;dur=Z, prefill;dur=W`` in ms with 3 decimals;
  ``preprocess`` after ``validate`` for a request with images (decoding them is part of ``validate``).
- ``timings`` (llama.cpp's object, reference/server-signals.md): ``prompt_n``, ``prompt_ms`` (prefill),
  ``prompt_per_token_ms``, ``prompt_per_second``, ``predicted_n``, ``predicted_ms`` (decode),
  ``predicted_per_token_ms``, ``predicted_per_second``, ``cache_n`` (always 0: the lab has no prefix cache).
- ``latscope`` (the lab's own object): ``request_id``, ``parse_ms``, ``validate_ms``, ``queue_ms``,
  ``window_wait_ms``, ``prefill_ms``, ``decode_ms``, ``preemptions`` (``image_bytes`` and ``preprocess_ms`` with
  images); ``sent_ns`` is added by the writer under
  ``--truth``.
"""

from __future__ import annotations

from typing import Any

from latscope.lab.gateway import CompletionRequest
from latscope.lab.scheduler import RequestStats
from latscope.units import NS_PER_MS


def ms(ns: int) -> float:
    """Nanoseconds → milliseconds, rounded to the microsecond (what a response needs to carry)."""
    return round(ns / NS_PER_MS, 3)


def _rounded(value: float | None) -> float:
    return 0.0 if value is None else round(value, 3)


def server_timing(parsed: CompletionRequest, stats: RequestStats, *, decode: bool = False) -> bytes:
    """The ``Server-Timing`` value; ``decode`` adds the decode phase (known only once the response is complete)."""
    parts = [
        b"parse;dur=%.3f" % (parsed.parse_ns / NS_PER_MS),
        b"validate;dur=%.3f" % (parsed.validate_ns / NS_PER_MS),
        b"queue;dur=%.3f" % (stats.queue_ms or 0.0),
        b"prefill;dur=%.3f" % (stats.prefill_ms or 0.0),
    ]
    if parsed.images:
        parts.insert(2, b"preprocess;dur=%.3f" % (parsed.preprocess_ns / NS_PER_MS))
    if decode:
        parts.append(b"decode;dur=%.3f" % (stats.decode_ms or 0.0))
    return b", ".join(parts)


def llama_timings(stats: RequestStats, completion_tokens: int) -> dict[str, Any]:
    """llama.cpp's ``timings`` object for a finished request (per-second rates are 0 when a phase took no time)."""
    prompt_n = stats.prompt_tokens
    prompt_ms = _rounded(stats.prefill_ms)
    predicted_ms = _rounded(stats.decode_ms)
    return {
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": 1000.0 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
        "predicted_n": completion_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / completion_tokens if completion_tokens else 0.0,
        "predicted_per_second": 1000.0 * completion_tokens / predicted_ms if predicted_ms > 0 else 0.0,
        "cache_n": 0,
    }


def latscope_fields(request_id: str, parsed: CompletionRequest, stats: RequestStats) -> dict[str, Any]:
    """The lab's own per-request object (durations in ms)."""
    return {
        "request_id": request_id,
        "parse_ms": ms(parsed.parse_ns),
        "validate_ms": ms(parsed.validate_ns),
        "queue_ms": _rounded(stats.queue_ms),
        "window_wait_ms": ms(stats.window_wait_ns),
        "prefill_ms": _rounded(stats.prefill_ms),
        "decode_ms": _rounded(stats.decode_ms),
        "preemptions": stats.preemptions,
        **({"image_bytes": parsed.image_bytes, "preprocess_ms": ms(parsed.preprocess_ns)} if parsed.images else {}),
    }


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI's ``usage`` object; with ``cached_tokens``, its ``prompt_tokens_details`` (the prompt tokens the
    prefix cache served)."""
    fields: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        fields["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return fields
