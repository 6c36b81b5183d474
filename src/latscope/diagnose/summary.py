"""The typical request of a run, summarised: the reference for severities, the timeline summary (where its time
goes, phase by phase) and the baseline numbers (TTFT vs prompt length, decode cadence). Durations in ms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from latscope.checks.baseline import BaselineEvidence
from latscope.checks.samples import SERVER_PHASES, Reference, RequestSample
from latscope.checks.stats import fit_line, median, percentile

#: Phases of the summary, in request order: connection setup (paid only on a new connection), upload, the server's
#: time to the first byte, first byte → first token, first token → end of stream.
PHASES = ("dns", "connect", "tls", "send", "wait", "first_token", "stream")


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def phases(sample: RequestSample) -> dict[str, float | None]:
    """The summary phases of one request (ms; None when the phase did not happen)."""
    first_token = None
    if sample.ttft_ms is not None and sample.ttfb_ms is not None:
        first_token = max(0.0, sample.ttft_ms - sample.ttfb_ms)
    stream = None
    if sample.e2e_ms is not None and sample.ttft_ms is not None:
        stream = max(0.0, sample.e2e_ms - sample.ttft_ms)
    return {
        "dns": sample.dns_ms,
        "connect": sample.connect_ms,
        "tls": sample.tls_ms,
        "send": sample.send_ms,
        "wait": sample.wait_ms,
        "first_token": first_token,
        "stream": stream,
    }


def _ok(samples: Sequence[RequestSample]) -> list[RequestSample]:
    return [s for s in samples if s.ok and s.ttft_ms is not None and s.e2e_ms is not None]


def reference(baseline: BaselineEvidence | None) -> Reference | None:
    """The typical request's median TTFT and e2e (and median inter-token gap), or None when none completed."""
    if baseline is None:
        return None
    typical = _ok(baseline.typical)
    ttft = median([s.ttft_ms for s in typical if s.ttft_ms is not None])
    e2e = median([s.e2e_ms for s in typical if s.e2e_ms is not None])
    if ttft is None or e2e is None:
        return None
    gaps = [g for s in typical for g in s.itl_ms]
    return Reference(ttft_ms=ttft, e2e_ms=e2e, itl_ms=median(gaps))


def timeline_summary(baseline: BaselineEvidence | None) -> dict[str, Any]:
    """Where the typical request's time goes: median of each phase over the typical requests (a phase a reused
    connection skips counts 0), the cold request's own phases, TTFT, e2e, cadence, and the phases the server
    reported (``server_phases_ms``, when it reported any)."""
    typical = _ok(baseline.typical) if baseline is not None else []
    if baseline is None or not typical:
        return {"requests": 0}
    per_request = [phases(s) for s in typical]
    medians: dict[str, float | None] = {}
    for name in PHASES:
        values = [p[name] or 0.0 for p in per_request]
        medians[name] = _round(median(values))
    gaps = [g for s in typical for g in s.itl_ms]
    cold = phases(typical[0])
    out: dict[str, Any] = {
        "requests": len(typical),
        "prompt_tokens": baseline.typical_prompt_tokens,
        "max_tokens": baseline.typical_max_tokens,
        "phases_ms": medians,
        "cold_request_phases_ms": {k: _round(v) for k, v in cold.items()},
        "ttfb_ms": _round(median([s.ttfb_ms for s in typical if s.ttfb_ms is not None])),
        "ttft_ms": _round(median([s.ttft_ms for s in typical if s.ttft_ms is not None])),
        "e2e_ms": _round(median([s.e2e_ms for s in typical if s.e2e_ms is not None])),
        "output_tokens": int(median([float(s.output_tokens) for s in typical]) or 0),
        "itl_ms_p50": _round(percentile(gaps, 50)),
        "itl_ms_p95": _round(percentile(gaps, 95)),
        "tpot_ms": _round(sum(gaps) / len(gaps) if gaps else None),
        "reused": [s.reused for s in typical],
        "http_version": typical[0].http_version,
    }
    reported = server_phases(typical)
    if reported:
        out["server_phases_ms"] = reported
    return out


def server_phases(samples: Sequence[RequestSample]) -> dict[str, float]:
    """What the server reported of each phase (Server-Timing in headers or trailers, timing headers, body fields),
    median over the requests that reported it, in request-path order; empty when it reported nothing."""
    out: dict[str, float] = {}
    for phase in SERVER_PHASES:
        value = median([s.server_ms[phase] for s in samples if phase in s.server_ms])
        if value is not None:
            out[str(phase)] = round(value, 3)
    return out


def baseline_summary(baseline: BaselineEvidence | None) -> dict[str, Any]:
    """The prompt-length sweep (points and its least-squares line: prefill ms per 1k tokens) for the JSON."""
    if baseline is None:
        return {}
    points = baseline.sweep
    out: dict[str, Any] = {
        "sweep": [{"prompt_tokens": p.prompt_tokens, "ttft_ms": round(p.ttft_ms, 3)} for p in points],
    }
    fit = fit_line([p.prompt_tokens for p in points], [p.ttft_ms for p in points]) if len(points) >= 2 else None
    if fit is not None:
        out.update(
            prefill_ms_per_1k_tokens=round(fit.slope * 1000, 3),
            ttft_intercept_ms=round(fit.intercept, 3),
            r2=round(fit.r2, 4),
        )
    if baseline.max_prompt_tokens_accepted is not None:
        out["max_prompt_tokens_accepted"] = baseline.max_prompt_tokens_accepted
    return out
