"""The streaming experiment: the same streamed request under different ACK behaviours, and at two lengths.

Per-read analysis (events per read, burst sizes, gaps) comes with every sample; the conditions are:

- ``reused``: one client pool, a warm-up request, then the measured ones (reused connections when the server keeps
  them alive) — the kernel's default ACK behaviour, which delays ACKs on a connection that has exchanged a request;
- ``delayed_ack``: new connections kept in delayed-ACK mode from before the request on (``Client(delayed_ack=True)``,
  Linux ``TCP_QUICKACK`` 0), the same ACK state without relying on the server keeping connections alive;
- ``quickack``: the client ACKs every read at once (``Client(quickack=True)``): the control, where Nagle's algorithm
  has nothing to wait for; also measured with ``max_tokens`` 1 (``quickack_short``) for the buffering comparison,
  and on new connections (``quickack_fresh``, alternating with ``delayed_ack``: the control that pays a new
  connection's first request too);
- ``quickack_http11`` (only when the target negotiated HTTP/2): the quickack pair again on a client that offers only
  HTTP/1.1. A proxy may hold one protocol's stream and forward the other's (nginx 1.22 with proxy buffering bursts
  HTTP/1.1 over TLS by 16 KB and forwards HTTP/2 writes as they come), and most clients speak only HTTP/1.1 (httpx
  and requests by default);
- ``fresh`` (not in quick mode): new connections with the default ACK behaviour, for the per-read picture.
"""

from __future__ import annotations

from latscope.checks.samples import RequestSample
from latscope.checks.streaming import StreamEvidence
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.wire.tcpinfo import delayed_ack_supported, quickack_supported

STREAM_REQUESTS = 3
STREAM_REQUESTS_QUICK = 2
PROMPT_TOKENS = 16


def planned_requests(quick: bool, tls: bool = False) -> int:
    """Requests this experiment sends at most (over TLS, HTTP/2 may add the HTTP/1.1 pair)."""
    n = STREAM_REQUESTS_QUICK if quick else STREAM_REQUESTS
    http11 = 1 + 2 * n if tls else 0
    return 4 + n * (5 if quick else 6) + http11


async def run(ctx: Context, prior: Prior) -> StreamEvidence:
    """Run the streaming experiment with streams as long as the typical request's (see the module docstring)."""
    max_tokens = prior.typical_max_tokens
    n = STREAM_REQUESTS_QUICK if ctx.quick else STREAM_REQUESTS
    async with ctx.client() as client:
        await ctx.send(client, ctx.spec(PROMPT_TOKENS, 1), label="warm-up")
        reused = await ctx.send_series(client, n, PROMPT_TOKENS, max_tokens, "reused")
    delayed: list[RequestSample] = []
    quick_fresh: list[RequestSample] = []
    delayed_ok = delayed_ack_supported()
    if delayed_ok:
        async with ctx.client(delayed_ack=True) as slow_acks, ctx.client(quickack=True) as quick_acks:
            # a client's first connection pays its cold start (the TLS context, the server's first accept from it):
            # one unmeasured request on a new connection each
            for client, label in ((slow_acks, "delayed-ack"), (quick_acks, "quickack new connection")):
                await ctx.send(client, ctx.spec(PROMPT_TOKENS, 1), label=f"{label} warm-up", new_connection=True)
            for i in range(n):
                # alternately, each first in turn, so both pay a new connection's first request under the same load
                pair = [(slow_acks, "delayed-ack", delayed), (quick_acks, "quickack new connection", quick_fresh)]
                for client, label, samples in pair if i % 2 == 0 else pair[::-1]:
                    spec = ctx.spec(PROMPT_TOKENS, max_tokens)
                    samples.append(await ctx.send(client, spec, label=f"{label} {i + 1}/{n}", new_connection=True))
    quick_long: list[RequestSample] = []
    quick_short: list[RequestSample] = []
    await _quickack_pairs(ctx, max_tokens, n, quick_long, quick_short, http2=True)
    long_http11: list[RequestSample] = []
    short_http11: list[RequestSample] = []
    if ctx.tls and any(s.ok and s.http_version == "HTTP/2" for s in quick_long):
        await _quickack_pairs(ctx, max_tokens, n, long_http11, short_http11, http2=False)
    fresh: list[RequestSample] = []
    if not ctx.quick:
        async with ctx.client() as client:
            fresh = await ctx.send_series(client, n, PROMPT_TOKENS, max_tokens, "fresh", new_connection=True)
    return StreamEvidence(
        max_tokens=max_tokens,
        fresh=tuple(fresh),
        reused=tuple(reused),
        delayed_ack=tuple(delayed),
        quickack=tuple(quick_long),
        quickack_short=tuple(quick_short),
        quickack_fresh=tuple(quick_fresh),
        quickack_http11=tuple(long_http11),
        quickack_short_http11=tuple(short_http11),
        delayed_ack_supported=delayed_ok,
        quickack_supported=quickack_supported(),
    )


async def _quickack_pairs(
    ctx: Context,
    max_tokens: int,
    n: int,
    long: list[RequestSample],
    short: list[RequestSample],
    *,
    http2: bool,
) -> None:
    """``n`` streams of ``max_tokens`` and ``n`` of 1 token, quickack on, after a warm-up, appended to ``long`` and
    ``short``; ``http2`` False offers only HTTP/1.1."""
    suffix = "" if http2 else " http/1.1"
    async with ctx.client(quickack=True, http2=http2) as client:
        await ctx.send(client, ctx.spec(PROMPT_TOKENS, 1), label=f"warm-up (quickack{suffix})")
        for i in range(n):
            # interleaved, so a drift in the server's speed affects both lengths alike
            long.append(
                await ctx.send(client, ctx.spec(PROMPT_TOKENS, max_tokens), label=f"quickack{suffix} {i + 1}/{n}")
            )
            short.append(
                await ctx.send(client, ctx.spec(PROMPT_TOKENS, 1), label=f"quickack{suffix} max_tokens 1 {i + 1}/{n}")
            )


EXPERIMENT = Experiment(
    family="streaming",
    description="per-read analysis under delayed ACKs and quickack, TTFT vs max_tokens",
    planned_requests=lambda ctx: planned_requests(ctx.quick, ctx.tls),
    run=run,
)
