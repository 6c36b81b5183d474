"""The queueing experiment: a short prompt's TTFT alone, and while a few long prompts are in flight.

1. Short requests alone (nothing else in flight): the short TTFT.
2. The long prompt is sized from the baseline sweep so its prefill is clearly measurable (about
   :data:`TARGET_PREFILL_FACTOR` short TTFTs, at least :data:`TARGET_PREFILL_MIN_MS`), within
   [:data:`LONG_TOKENS_MIN`, :data:`LONG_TOKENS_MAX`]; a prompt the server refuses (context length: a 4xx, or a
   stream that ends empty, see ``RequestSample.refused``) is halved, one that prefills too fast is doubled, and
   between a refused size and an accepted one that prefills too fast, sizes in between are tried. Long requests
   alone give their TTFT.
3. Rounds: :data:`LONGS_PER_ROUND` long requests are sent at once; as soon as all have arrived (every byte
   acknowledged by the server's TCP: on a remote server a long prompt needs several round trips, and a short request
   sent when they were merely written overtakes them), a short one follows. Its TTFT is the contended short TTFT; the
   first long request's head start inside the server (measured lead + one round trip) is recorded with it. A round
   whose long requests did not arrive within :data:`WRITE_WAIT_S` is not counted.

TTFTs here exclude the client's connection setup (first token − connection ready) and quickack is on, so new
connections and the server's socket options cannot blur the scheduler's effect. ``max_tokens`` is 1 everywhere.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from latscope.checks.baseline import BaselineEvidence
from latscope.checks.queueing import QueueEvidence
from latscope.checks.samples import RequestSample
from latscope.checks.stats import fit_line, median
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.timeline.model import ServerPhase, Timeline
from latscope.wire import Client

SHORT_PROMPT_TOKENS = 16
SHORT_ALONE = 5
SHORT_ALONE_QUICK = 3
#: Long requests alone: the check takes the fastest as the long prefill, so even a quick run needs two.
LONG_ALONE = 2
LONG_ALONE_QUICK = 2
ROUNDS = 3
ROUNDS_QUICK = 2
#: Long requests in flight per round: with three, a FIFO queue holds a short request ≈ 3 prefills, a shortest-first
#: or chunked scheduler at most the one step already running; the check needs that gap.
LONGS_PER_ROUND = 3
#: The long prefill aims at this many short TTFTs …
TARGET_PREFILL_FACTOR = 20.0
#: … and at least this long (ms), so it stands clear of timer and network noise.
TARGET_PREFILL_MIN_MS = 50.0
#: Long prompts of at least this many tokens when the server prefills them within the budget below: several times
#: the prefill chunk of chunked-prefill schedulers (vLLM's token budget is 2048–8192), so a scheduler that
#: interleaves chunks holds a short request for well under one long prefill, while FIFO holds it for all of them.
LONG_TOKENS_PREFERRED = 8192
#: Longest long prefill (ms) worth waiting for: rounds × long requests × this bounds the experiment's time.
LONG_PREFILL_BUDGET_MS = 1500.0
LONG_TOKENS_MIN = 1024
LONG_TOKENS_MAX = 32768
#: Used when the sweep gave no slope.
LONG_TOKENS_DEFAULT = 4096
#: The slope is fitted through sweep points of at least this many tokens when two or more exist: below it TTFT is
#: mostly the request's fixed costs. With fewer (a server whose context refused the longer sweep prompts) every point
#: is used.
SLOPE_MIN_TOKENS = 128
MAX_HALVINGS = 4
MAX_DOUBLINGS = 2
#: Sizes tried between an accepted and a refused long prompt, at most: two steps get within a quarter of the gap.
MAX_BISECTIONS = 2
#: Sizes between two tried ones are rounded to this many tokens (a prompt's chat template adds a few anyway).
SIZE_STEP = 16
#: Longest wait (s) for the long requests to arrive before the round is given up.
WRITE_WAIT_S = 5.0
WRITE_POLL_S = 0.0005


def planned_requests(quick: bool) -> int:
    """Requests this experiment sends (about: sizing may add a few)."""
    short = SHORT_ALONE_QUICK if quick else SHORT_ALONE
    long = LONG_ALONE_QUICK if quick else LONG_ALONE
    rounds = ROUNDS_QUICK if quick else ROUNDS
    return short + long + 1 + rounds * (LONGS_PER_ROUND + 1)


def initial_long_tokens(baseline: BaselineEvidence | None, short_ttft_ms: float) -> tuple[int, str]:
    """The first long prompt size to try (tokens) and how it was chosen, from the sweep's TTFT-vs-tokens slope."""
    target = max(TARGET_PREFILL_FACTOR * short_ttft_ms, TARGET_PREFILL_MIN_MS)
    cap = LONG_TOKENS_MAX
    accepted = None if baseline is None else baseline.max_prompt_tokens_accepted
    if baseline is not None and accepted is not None and any(s.refused for s in baseline.failures):
        cap = max(LONG_TOKENS_MIN, accepted)
    points = [] if baseline is None else list(baseline.sweep)
    long_points = [p for p in points if p.prompt_tokens >= SLOPE_MIN_TOKENS]
    if len(long_points) >= 2:
        points = long_points  # a short prompt's TTFT is mostly fixed costs that would bend the slope
    fit = fit_line([p.prompt_tokens for p in points], [p.ttft_ms for p in points]) if len(points) >= 2 else None
    if fit is None or fit.slope <= 0:
        tokens = min(cap, LONG_TOKENS_DEFAULT)
        return tokens, f"no prefill slope from the sweep: started at {tokens}"
    needed = int(target / fit.slope)
    affordable = int(LONG_PREFILL_BUDGET_MS / fit.slope)
    wanted = max(needed, min(LONG_TOKENS_PREFERRED, affordable))
    tokens = min(cap, LONG_TOKENS_MAX, max(LONG_TOKENS_MIN, -(-wanted // 256) * 256))
    return tokens, (
        f"{tokens} tokens: at least a {target:.0f} ms prefill at {fit.slope * 1000:.2f} ms per 1k tokens (sweep)"
    )


async def _size_long_prompt(
    ctx: Context,
    client: Client,
    tokens: int,
    short_ttft: float,
    target: float,
    failed: list[RequestSample],
    notes: list[str],
) -> tuple[int, float | None]:
    """Find the long prompt: start at ``tokens``; halve it while the server refuses it (its context is shorter), double
    it while it prefills in under half of ``target`` ms, and once a refused size and an accepted one are known, try
    between them while the accepted one is still short of that (a context of 1000 tokens should not leave the test
    with a 250-token prompt). Returns the size used and its TTFT alone (None when every size was refused)."""
    halvings = doublings = bisections = 0
    accepted: tuple[int, float] | None = None  # the largest size that completed, and its TTFT
    refused_at: int | None = None  # the smallest size the server refused
    while True:
        sample = await _timed_long(ctx, client, tokens, f"long alone {tokens} tokens")
        if not sample.ok or sample.ttft_after_setup_ms is None:
            failed.append(sample)
            if not sample.refused:
                break
            refused_at = tokens
            status = sample.status or 0
            why = f"HTTP {status}" if status >= 300 else f"HTTP {status} with a stream that carried no token"
            if accepted is None and halvings < MAX_HALVINGS and tokens // 2 >= SHORT_PROMPT_TOKENS * 4:
                tokens //= 2
                halvings += 1
                notes.append(f"refused ({why}): halved to {tokens}")
                continue
            if accepted is not None and bisections < MAX_BISECTIONS:
                tokens = _between(accepted[0], refused_at)
                if tokens > accepted[0]:
                    bisections += 1
                    notes.append(f"refused ({why}): tried {tokens}")
                    continue
            break
        ttft = sample.ttft_after_setup_ms
        accepted = (tokens, ttft)
        prefill = ttft - short_ttft
        if prefill >= target / 2:
            break
        if refused_at is None and doublings < MAX_DOUBLINGS and tokens * 2 <= LONG_TOKENS_MAX:
            tokens *= 2
            doublings += 1
            notes.append(f"prefill {prefill:.0f} ms: doubled to {tokens}")
            continue
        if refused_at is not None and bisections < MAX_BISECTIONS and _between(tokens, refused_at) > tokens:
            tokens = _between(tokens, refused_at)
            bisections += 1
            notes.append(f"prefill {prefill:.0f} ms: tried {tokens}, below the {refused_at} refused")
            continue
        break
    if accepted is None:
        return tokens, None
    if accepted[0] != tokens:
        notes.append(f"kept {accepted[0]}")
    return accepted


def _between(accepted: int, refused: int) -> int:
    """The midpoint of an accepted and a refused prompt size, rounded down to :data:`SIZE_STEP` tokens."""
    return (accepted + refused) // 2 // SIZE_STEP * SIZE_STEP


async def _timed_long(ctx: Context, client: Client, tokens: int, label: str) -> RequestSample:
    return await ctx.send(client, ctx.spec(tokens, 1), label=label)


async def run(ctx: Context, prior: Prior) -> QueueEvidence:
    """Run the queueing experiment (see the module docstring); the long prompt is sized from the baseline's sweep."""
    baseline = prior.baseline
    quick = ctx.quick
    failed: list[RequestSample] = []
    long_failed: list[RequestSample] = []  # long prompts sent alone: refusals there are the sizing at work
    short_alone: list[float] = []
    long_alone: list[float] = []
    contended: list[float] = []
    server_queue: list[float] = []
    long_rounds: list[tuple[float, ...]] = []
    head_starts: list[float] = []
    undelivered = 0
    verified = True
    notes: list[str] = []
    async with ctx.client(quickack=True) as client:
        for index in range(SHORT_ALONE_QUICK if quick else SHORT_ALONE):
            sample = await ctx.send(client, ctx.spec(SHORT_PROMPT_TOKENS, 1), label=f"short alone {index + 1}")
            if sample.ok and sample.ttft_after_setup_ms is not None:
                short_alone.append(sample.ttft_after_setup_ms)
            else:
                failed.append(sample)
        short_ttft = median(short_alone)
        if short_ttft is None:
            return QueueEvidence(SHORT_PROMPT_TOKENS, 0, LONGS_PER_ROUND, failures=tuple(failed))
        tokens, how = initial_long_tokens(baseline, short_ttft)
        notes.append(how)
        target = max(TARGET_PREFILL_FACTOR * short_ttft, TARGET_PREFILL_MIN_MS)
        tokens, first_long = await _size_long_prompt(ctx, client, tokens, short_ttft, target, long_failed, notes)
        if first_long is None:
            return QueueEvidence(
                SHORT_PROMPT_TOKENS,
                tokens,
                LONGS_PER_ROUND,
                short_alone_ms=tuple(short_alone),
                failures=tuple(failed),
                note="; ".join(notes),
                long_alone_failures=tuple(long_failed),
            )
        long_alone.append(first_long)
        for index in range(1, LONG_ALONE_QUICK if quick else LONG_ALONE):
            sample = await _timed_long(ctx, client, tokens, f"long alone {index + 1}")
            if sample.ok and sample.ttft_after_setup_ms is not None:
                long_alone.append(sample.ttft_after_setup_ms)
            else:
                long_failed.append(sample)
        long_p50 = median(long_alone)
        assert long_p50 is not None
        delay_s = max(0.001, min(0.005, 0.05 * (long_p50 - short_ttft) / 1000.0))
        for round_index in range(ROUNDS_QUICK if quick else ROUNDS):
            sent = await _round(ctx, client, tokens, delay_s, round_index)
            short, longs = sent.short, sent.longs
            bad = [s for s in (*longs, short) if not s.ok]
            failed.extend(bad)
            if bad or short.ttft_after_setup_ms is None:
                continue  # a round whose long requests failed did not hold the short one up: not evidence
            if sent.delivered is False:
                undelivered += 1
                continue  # the short request may have overtaken them on the way: not the situation meant
            verified = verified and sent.delivered is True
            contended.append(short.ttft_after_setup_ms)
            if sent.lead_ms is not None and short.rtt_ms is not None:
                # the first long request's head start inside the server when the short one arrived: the client's
                # lead after it saw the long one acknowledged, plus that acknowledgement's way back and the short
                # request's way there (one round trip)
                head_starts.append(sent.lead_ms + short.rtt_ms)
            long_rounds.append(tuple(s.ttft_after_setup_ms for s in longs if s.ttft_after_setup_ms is not None))
            if ServerPhase.QUEUE in short.server_ms:
                server_queue.append(short.server_ms[ServerPhase.QUEUE])
    return QueueEvidence(
        short_prompt_tokens=SHORT_PROMPT_TOKENS,
        long_prompt_tokens=tokens,
        longs_per_round=LONGS_PER_ROUND,
        short_alone_ms=tuple(short_alone),
        long_alone_ms=tuple(long_alone),
        short_contended_ms=tuple(contended),
        server_queue_ms=tuple(server_queue),
        failures=tuple(failed),
        note="; ".join(notes),
        long_contended_ms=tuple(long_rounds),
        long_alone_failures=tuple(long_failed),
        head_start_ms=tuple(head_starts) if len(head_starts) == len(contended) else (),
        rounds_not_arrived=undelivered,
        arrival_verified=verified,
    )


@dataclass(frozen=True, slots=True)
class _Round:
    """One contended round as sent: the short request's sample, the long ones', whether every long request had
    reached the server before the short one was sent (True; False: it had not, within :data:`WRITE_WAIT_S`; None:
    this platform cannot tell), and the short request's send time after the first long request had arrived (ms)."""

    short: RequestSample
    longs: list[RequestSample]
    delivered: bool | None
    lead_ms: float | None


async def _round(ctx: Context, client: Client, tokens: int, delay_s: float, index: int) -> _Round:
    """One contended round: the long requests at once, then the short one once they are all in the server's kernel
    (every byte sent acknowledged: :meth:`~latscope.wire.Client.send_backlog`). A remote server needs several round
    trips to receive a long prompt (slow start, flow control): a short request sent when the long ones were merely
    written would overtake them on the way and measure nothing."""
    timelines = [Timeline() for _ in range(LONGS_PER_ROUND)]
    tasks = [
        asyncio.create_task(
            ctx.send(client, ctx.spec(tokens, 1), label=f"round {index + 1} long {n + 1}", timeline=timelines[n])
        )
        for n in range(LONGS_PER_ROUND)
    ]
    arrived: list[int | None] = [None] * LONGS_PER_ROUND  # when each long request was seen to have arrived (ns)
    verified: bool | None = True
    deadline = time.monotonic() + WRITE_WAIT_S
    try:
        while time.monotonic() < deadline:
            waiting = False
            for n, (t, task) in enumerate(zip(timelines, tasks, strict=True)):
                if arrived[n] is not None or task.done() or t.error is not None:
                    continue
                if t.send_end_ns is None:
                    waiting = True
                    continue
                backlog = client.send_backlog(t)
                if backlog is None:  # no TCP_INFO here: written is the best this client can know
                    verified = None
                    arrived[n] = t.send_end_ns
                elif backlog == 0:
                    arrived[n] = time.monotonic_ns()
                else:
                    waiting = True
            if not waiting:
                break
            await asyncio.sleep(WRITE_POLL_S)
        else:
            verified = False
        await asyncio.sleep(delay_s)
        short_timeline = Timeline()
        short = await ctx.send(
            client, ctx.spec(SHORT_PROMPT_TOKENS, 1), label=f"round {index + 1} short", timeline=short_timeline
        )
        longs = list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    first = min((at for at in arrived if at is not None), default=None)
    sent = short_timeline.send_start_ns
    lead_ms = None if first is None or sent is None else (sent - first) / 1e6
    return _Round(short, longs, verified, lead_ms)


EXPERIMENT = Experiment(
    family="queueing",
    description="a short prompt alone and behind long ones",
    planned_requests=lambda ctx: planned_requests(ctx.quick),
    run=run,
    needs_sweep=True,  # it sizes its long prompt from the sweep's prefill slope
)
