"""``trace-context-dropped``: a ``traceparent`` the client sent does not reach the server's traces.

Mechanism: an edge or gateway that does not propagate W3C Trace Context (it strips the header, or starts a trace of
its own and forwards that) cuts the client's trace from the server's: a slow request can no longer be followed from
the client's span into the server's spans. The experiment sends one request with a fresh ``traceparent``; the server
tells which trace it recorded the request under through ``traceresponse`` (Trace Context Level 2), a Server-Timing
``traceparent`` metric, an id header that contains the trace id, or the body: the sent trace id anywhere in its first
bytes, or another one in a ``traceparent``-shaped value or a ``trace_id`` member (:mod:`latscope.signals.traceresponse`;
the evidence names the source, ``body`` for the body).

Outcomes: the sent trace id comes back → Clear; only a *different* trace id comes back from a source that names the
server's trace (``traceresponse``, Server-Timing, a trace id the body states as one) → Finding; no trace id at all
→ NotTested (most servers return none, and silence proves nothing either way).

Cost and severity: the finding costs no time (0 ms) — it is an observability defect: what it costs is the ability to
diagnose the latency of one request end to end, so it is reported at low severity (severities rank by the share of
the typical TTFT a finding costs, :mod:`latscope.checks.severity`) and never outranks a finding that costs time.
"""

from __future__ import annotations

from dataclasses import dataclass

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.findings import Clear, Confidence, NotTested, Outcome, Severity, make_finding
from latscope.signals.traceresponse import ReturnedTraceId

TRACE_ID = "trace-context-dropped"


@dataclass(frozen=True, slots=True)
class TraceContextEvidence:
    """The trace-context experiment: one request carrying a fresh W3C ``traceparent``.

    Fields:
        sample: the request (None when none was sent).
        sent_trace_id: the trace id of the ``traceparent`` it carried, 32 hex digits (None when it carried none).
        returned: the trace ids the response named (``traceresponse``, Server-Timing, id headers containing the
            sent id; see :mod:`latscope.signals.traceresponse`).
    """

    sample: RequestSample | None = None
    sent_trace_id: str | None = None
    returned: tuple[ReturnedTraceId, ...] = ()


def check_trace_context(ev: TraceContextEvidence, reference: Reference | None) -> Outcome:
    """Clear when the response names the sent trace id, a Finding when it names only other trace ids in a source
    that states the server's trace, NotTested when it names none (see the module docstring)."""
    if ev.sample is None or ev.sent_trace_id is None:
        return NotTested(
            TRACE_ID, "no request carried a traceparent of latscope's (one set with a header option is left alone)"
        )
    sent = ev.sent_trace_id
    evidence: dict[str, object] = {
        "sent_trace_id": sent,
        "returned": [{"source": r.source, "trace_id": r.trace_id} for r in ev.returned],
    }
    same = sorted({r.source for r in ev.returned if r.trace_id == sent})
    if same:
        return Clear(TRACE_ID, f"the server used the trace id it was sent (seen in {', '.join(same)})", evidence)
    other = [r for r in ev.returned if r.authoritative and r.trace_id != sent]
    if other:
        first = other[0]
        return make_finding(
            TRACE_ID,
            severity=Severity.LOW,
            cost_ms=0.0,
            cost_basis="no added latency: the client's trace is cut from the server's spans",
            evidence=evidence,
            rule=(
                f"the request's traceparent named trace {sent}; the response's {first.source} names trace "
                f"{first.trace_id}: the trace context was not propagated"
            ),
            confidence=Confidence.HIGH,
        )
    if not ev.sample.ok:
        reason = failures.describe(ev.sample)
        return NotTested(TRACE_ID, f"the request with a traceparent failed ({reason}) and named no trace id")
    return NotTested(
        TRACE_ID,
        "the server returned no trace id (no traceresponse, no Server-Timing traceparent, no id header containing "
        "the sent trace id, none in the body): whether it propagates trace context cannot be told from outside",
    )
