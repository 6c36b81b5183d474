"""Per-request timing headers from TGI, OpenAI and Envoy, each converted to milliseconds (server-signals.md).

=================================  =============  =================  ==============================================
header                             unit           measure            meaning
=================================  =============  =================  ==============================================
``x-compute-time`` (TGI)           s, float       ``e2e``            total time in TGI's handler
``x-total-time`` (TGI)             ms, integer    ``e2e``            the same total, rounded to ms
``x-validation-time`` (TGI)        ms             ``validate``       validation + tokenising
``x-queue-time`` (TGI)             ms             ``queue``          waiting for a batch slot
``x-inference-time`` (TGI)         ms             ``inference``      prefill + decode
``x-time-per-token`` (TGI)         ms             ``time_per_token`` inference ÷ generated tokens (prefill included)
``openai-processing-ms``           ms, integer    ``processing``     server-side processing time (OpenAI and
                                                                     servers copying it, e.g. llama-cpp-python)
``x-envoy-upstream-service-time``  ms, integer    ``upstream``       upstream processing + Envoy↔upstream network
=================================  =============  =================  ==============================================

TGI sends its timing headers on non-streaming responses only. ``x-compute-time`` comes first so that
``Timeline.server_ms("e2e")`` returns the more precise of the two totals. TGI's ``x-prompt-tokens`` and
``x-generated-tokens`` are token counts, read by :func:`tgi_token_counts`.
"""

from __future__ import annotations

from latscope.signals.headers import HeaderInput, first_values, warn
from latscope.signals.timeformats import parse_finite_float, parse_nonnegative_int
from latscope.timeline.model import ServerMeasure, ServerPhase

# (header, measure name, factor to milliseconds)
TIMING_HEADERS: tuple[tuple[str, str, float], ...] = (
    ("x-compute-time", ServerPhase.E2E, 1000.0),
    ("x-total-time", ServerPhase.E2E, 1.0),
    ("x-validation-time", ServerPhase.VALIDATE, 1.0),
    ("x-queue-time", ServerPhase.QUEUE, 1.0),
    ("x-inference-time", "inference", 1.0),
    ("x-time-per-token", "time_per_token", 1.0),
    ("openai-processing-ms", ServerPhase.PROCESSING, 1.0),
    ("x-envoy-upstream-service-time", ServerPhase.UPSTREAM, 1.0),
)


def timing_header_measures(headers: HeaderInput, *, warnings: list[str] | None = None) -> list[ServerMeasure]:
    """Every timing header present (see the module table), as ServerMeasures in milliseconds."""
    first = first_values(headers)
    measures: list[ServerMeasure] = []
    for header, name, to_ms in TIMING_HEADERS:
        raw = first.get(header)
        if raw is None:
            continue
        value = parse_finite_float(raw)
        if value is None or value < 0:
            warn(warnings, f"header: {header}: {raw!r} is not a non-negative number; ignored")
            continue
        measures.append(ServerMeasure(name, value * to_ms, f"header:{header}"))
    return measures


def tgi_token_counts(headers: HeaderInput, *, warnings: list[str] | None = None) -> tuple[int | None, int | None]:
    """TGI's ``(x-prompt-tokens, x-generated-tokens)``; None where absent or unreadable."""
    first = first_values(headers)
    counts: list[int | None] = []
    for header in ("x-prompt-tokens", "x-generated-tokens"):
        raw = first.get(header)
        value = None if raw is None else parse_nonnegative_int(raw)
        if raw is not None and value is None:
            warn(warnings, f"header: {header}: {raw!r} is not a non-negative integer; ignored")
        counts.append(value)
    return counts[0], counts[1]
