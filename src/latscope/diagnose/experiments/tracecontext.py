"""The trace-context experiment: one short request carrying a fresh W3C ``traceparent`` (the measuring client draws a
random trace id for it), on a client of its own; the trace ids its response names, in its headers, trailers or the
first bytes of its body, are the evidence (:mod:`latscope.signals.traceresponse`)."""

from __future__ import annotations

from latscope.checks.tracecontext import TraceContextEvidence
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.signals.traceresponse import returned_trace_ids

PROMPT_TOKENS = 16
#: A couple of tokens: only the response head (and trailers) are read.
MAX_TOKENS = 2


async def run(ctx: Context, prior: Prior) -> TraceContextEvidence:
    """Run the trace-context experiment (see the module docstring)."""
    async with ctx.client(trace_context=True) as client:
        sample, t = await ctx.send_recorded(client, ctx.spec(PROMPT_TOKENS, MAX_TOKENS), label="traceparent")
    returned = returned_trace_ids(
        t.response_headers, t.response_trailers, sent_trace_id=t.trace_id, body_trace_ids=t.body_trace_ids
    )
    return TraceContextEvidence(sample=sample, sent_trace_id=t.trace_id, returned=tuple(returned))


EXPERIMENT = Experiment(
    family="tracecontext",
    description="one request with a fresh W3C traceparent: does the server's trace carry the client's trace id?",
    planned_requests=lambda ctx: 1,
    run=run,
)
