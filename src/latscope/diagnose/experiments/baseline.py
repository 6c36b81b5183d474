"""The baseline: what a typical request costs here, and how TTFT grows with the prompt.

- The typical request: a few streamed requests one after another on one fresh client (the first pays the cold path:
  DNS, TCP, TLS), the kernel's default ACK behaviour — what an ordinary client sees. Every finding's cost is put
  next to its TTFT and end-to-end time, and its phases make the timeline summary.
- The prompt-length sweep (``max_tokens`` 1, quickack on so the server's socket options cannot add to it): TTFT
  without connection setup vs prompt tokens, which the queueing experiment uses to size its long prompt. A prompt the
  server refuses (context too long: a 4xx, or a stream that ends empty — see ``RequestSample.refused``) ends the
  sweep there.
"""

from __future__ import annotations

from latscope.checks.baseline import BaselineEvidence, SweepPoint
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context

#: Prompt sizes of the sweep (tokens, about): short chat turns to a long document.
SWEEP_TOKENS = (16, 128, 512, 2048, 4096)
SWEEP_TOKENS_QUICK = (16, 512, 4096)
SWEEP_REPEATS = 2
SWEEP_REPEATS_QUICK = 1
#: The typical request: a short chat prompt and a short answer, a few times.
TYPICAL_PROMPT_TOKENS = 64
TYPICAL_MAX_TOKENS = 32
TYPICAL_MAX_TOKENS_QUICK = 16
TYPICAL_REQUESTS = 3
TYPICAL_REQUESTS_QUICK = 3


def typical_max_tokens(quick: bool) -> int:
    """Tokens the typical request generates."""
    return TYPICAL_MAX_TOKENS_QUICK if quick else TYPICAL_MAX_TOKENS


def planned_requests(quick: bool, sweep: bool) -> int:
    """Requests this experiment sends at most."""
    typical = TYPICAL_REQUESTS_QUICK if quick else TYPICAL_REQUESTS
    if not sweep:
        return typical
    sizes = SWEEP_TOKENS_QUICK if quick else SWEEP_TOKENS
    return typical + len(sizes) * (SWEEP_REPEATS_QUICK if quick else SWEEP_REPEATS)


async def run(ctx: Context, *, sweep: bool = True) -> BaselineEvidence:
    """Measure the typical request, then (``sweep``) TTFT vs prompt length."""
    quick = ctx.quick
    max_tokens = typical_max_tokens(quick)
    count = TYPICAL_REQUESTS_QUICK if quick else TYPICAL_REQUESTS
    failures: list[RequestSample] = []
    typical: list[RequestSample] = []
    async with ctx.client() as client:
        for index in range(count):
            sample = await ctx.send(
                client, ctx.spec(TYPICAL_PROMPT_TOKENS, max_tokens), label=f"typical {index + 1}/{count}"
            )
            (typical if sample.ok else failures).append(sample)
    points: list[SweepPoint] = []
    accepted: int | None = None
    if sweep:
        sizes = SWEEP_TOKENS_QUICK if quick else SWEEP_TOKENS
        repeats = SWEEP_REPEATS_QUICK if quick else SWEEP_REPEATS
        async with ctx.client(quickack=True) as client:
            for tokens in sizes:
                refused = False
                for repeat in range(repeats):
                    sample = await ctx.send(client, ctx.spec(tokens, 1), label=f"sweep {tokens} tokens #{repeat + 1}")
                    if sample.ok and sample.ttft_after_setup_ms is not None:
                        points.append(SweepPoint(tokens, sample.ttft_after_setup_ms))
                        accepted = tokens
                    else:
                        failures.append(sample)
                        refused = sample.refused
                if refused:
                    break  # a longer prompt will be refused too (context length)
    return BaselineEvidence(
        sweep=tuple(points),
        typical=tuple(typical),
        typical_prompt_tokens=TYPICAL_PROMPT_TOKENS,
        typical_max_tokens=max_tokens,
        failures=tuple(failures),
        max_prompt_tokens_accepted=accepted,
    )
