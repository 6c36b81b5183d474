"""The KV-cache experiment: long streams one at a time, then :data:`CONCURRENCY` of them at once.

Each stream is a :data:`PROMPT_TOKENS`-token prompt generating :data:`MAX_TOKENS` tokens (:data:`MAX_TOKENS_QUICK`
in a quick run; quickack on, so the client's ACKs cannot hold a token back): together they need more KV cache than
a small or nearly full cache keeps, and they grow while they decode, which is when an engine out of blocks preempts
one. The control streams run first,
one at a time, in the same run. The target's metrics are scraped during the burst (:mod:`latscope.diagnose.metrics`)
for its preemption counter and KV-usage gauge. A prompt the server refuses for its length is halved (a context
shorter than the experiment's) down to :data:`MIN_PROMPT_TOKENS`.

The burst is bounded in time. Before it, two of the streams go at once, the target's metrics scraped meanwhile. An
engine that batches decodes them together (the pair takes about one stream's time, or the server's running-requests
gauge shows both: a CPU engine's batched step grows with the batch), and its burst is budgeted as
:data:`BATCH_SLOWDOWN` streams' time; a server that serves one stream at a time (the pair takes two) is budgeted as
its streams one after another, and sent as many as fit in :data:`BURST_BUDGET_S` (:data:`CONCURRENCY` at most, at
least :data:`MIN_BURST`, else none). At a GPU's 10-30 ms per token one stream takes seconds: budgeting every target
as serial would skip the very engines the experiment is for. A target that preempted during the pair already (a
cache too small for two streams) has shown the pressure: the pair is the burst.
"""

from __future__ import annotations

import asyncio

from latscope.checks.kvcache import KvEvidence
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.diagnose.metrics import scraping
from latscope.signals import MetricsWindow, NotAvailable

PROMPT_TOKENS = 768
MIN_PROMPT_TOKENS = 96
MAX_TOKENS = 256
#: Quick runs stream half as long.
MAX_TOKENS_QUICK = 128
CONCURRENCY = 8
ALONE = 2
ALONE_QUICK = 1
#: The burst is sent only when it would take at most this long (s), from the control streams' end-to-end time and
#: whether the target ran a pair together: the experiment stays bounded.
BURST_BUDGET_S = 12.0
#: A pair ran together when the slower of two streams sent at once took at most this many times one alone (two one
#: after another take twice as long).
TOGETHER_FACTOR = 1.5
#: What a batching engine's burst takes, in streams alone: each decode step grows with the batch.
BATCH_SLOWDOWN = 3.0
#: The fewest streams a burst cut to the budget may have: more than the pair, which did not preempt.
MIN_BURST = 3


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends (about: a refused prompt is sent again halved)."""
    return (ALONE_QUICK if quick else ALONE) + 2 + CONCURRENCY


async def run(ctx: Context, prior: Prior) -> KvEvidence:
    """Run the KV-cache experiment (see the module docstring)."""
    tokens = PROMPT_TOKENS
    length = MAX_TOKENS_QUICK if ctx.quick else MAX_TOKENS
    alone: list[RequestSample] = []
    async with ctx.client(quickack=True) as client:
        while len(alone) < (ALONE_QUICK if ctx.quick else ALONE):
            sample = await ctx.send(client, ctx.spec(tokens, length), label=f"long stream alone {len(alone) + 1}")
            if sample.refused and tokens // 2 >= MIN_PROMPT_TOKENS:
                tokens //= 2
                continue
            alone.append(sample)
            if not sample.ok:
                break
    if not any(s.ok for s in alone):
        return KvEvidence(tokens, length, CONCURRENCY, alone=tuple(alone))
    e2e_ms = min(s.e2e_after_setup_ms for s in alone if s.ok and s.e2e_after_setup_ms is not None)
    together, pair, pair_window = await _pair_together(ctx, tokens, length, e2e_ms)
    pair_stats = None if isinstance(pair_window, NotAvailable) else pair_window.stats
    if pair_stats is not None and pair_stats.preemptions:
        return KvEvidence(
            tokens,
            length,
            len(pair),
            tuple(alone),
            tuple(pair),
            preemptions=pair_stats.preemptions,
            kv_usage_max=None if pair_stats.kv_usage is None else pair_stats.kv_usage.max,
            metrics=f"{pair_stats.family} metrics at {pair_window.url} (two streams at once preempted already)",
        )
    concurrency = CONCURRENCY if together else min(CONCURRENCY, int(BURST_BUDGET_S * 1000.0 // e2e_ms))
    streams = BATCH_SLOWDOWN if together else concurrency
    if streams * e2e_ms / 1000.0 > BURST_BUDGET_S or concurrency < MIN_BURST:
        how = "it batched two streams" if together else "it served two streams one after the other"
        return KvEvidence(
            tokens,
            length,
            CONCURRENCY,
            alone=tuple(alone),
            skipped=(
                f"one stream of {tokens} + {length} tokens takes {e2e_ms / 1000.0:.1f} s here and {how}: "
                f"{CONCURRENCY if together else MIN_BURST} of them could take "
                f"{(streams if together else MIN_BURST) * e2e_ms / 1000.0:.1f} s, over the experiment's "
                f"{BURST_BUDGET_S:g} s"
            ),
        )
    async with scraping(ctx) as scrape, ctx.client(quickack=True, max_connections_per_origin=concurrency) as client:
        burst = await asyncio.gather(
            *(
                ctx.send(client, ctx.spec(tokens, length), label=f"long stream {n + 1}/{concurrency} at once")
                for n in range(concurrency)
            )
        )
    window = scrape.result
    if isinstance(window, NotAvailable) or window.stats is None:
        why = window.why if isinstance(window, NotAvailable) else f"metrics at {window.url} of no known server family"
        return KvEvidence(tokens, length, concurrency, tuple(alone), tuple(burst), metrics=f"no metrics: {why}")
    stats = window.stats
    return KvEvidence(
        tokens,
        length,
        concurrency,
        tuple(alone),
        tuple(burst),
        preemptions=stats.preemptions,
        kv_usage_max=None if stats.kv_usage is None else stats.kv_usage.max,
        metrics=f"{stats.family} metrics at {window.url}",
    )


async def _pair_together(
    ctx: Context, tokens: int, length: int, alone_ms: float
) -> tuple[bool, list[RequestSample], MetricsWindow | NotAvailable]:
    """Send two of the streams at once, the target's metrics scraped meanwhile: whether it decoded them together
    (the slower took at most :data:`TOGETHER_FACTOR` × ``alone_ms``, or its running-requests gauge reached two;
    False when either failed), the pair, and what the metrics said."""
    async with scraping(ctx) as scrape, ctx.client(quickack=True, max_connections_per_origin=2) as client:
        pair = await asyncio.gather(
            *(ctx.send(client, ctx.spec(tokens, length), label=f"long stream pair {n + 1}/2") for n in range(2))
        )
    times = [s.e2e_after_setup_ms for s in pair if s.ok]
    together = len(times) == 2 and all(t is not None for t in times)
    together = together and max(t for t in times if t is not None) <= TOGETHER_FACTOR * alone_ms
    window = scrape.result
    stats = None if isinstance(window, NotAvailable) else window.stats
    # the server's own gauge, where it has one: a CPU engine's batched step grows with the batch, so two streams
    # decoded together can take as long as two in a row (vLLM on two cores)
    running = None if stats is None else stats.running
    together = together or (running is not None and running.max >= 2)
    return together, list(pair), window


EXPERIMENT = Experiment(
    family="kvcache",
    description="long streams alone and many at once: do they stall mid-decode when the KV cache fills?",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
)
