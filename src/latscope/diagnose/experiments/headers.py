"""The header-size experiment: the same short request (``max_tokens`` 1) with growing padding headers, each size sent
twice: first on a new connection, then on a reused one.

A reused connection shows what the server (and every proxy on the way) pays per byte of head; a new connection adds
what TCP does with a large head on a cold path: a head past the initial congestion window (ten segments, about 14 KB:
RFC 6928) waits for the first acknowledgements, a round trip more at a distance. Each size's new connection goes first
and its reused request then takes a kept-alive connection of the pool (the previous request's), so the reused sweep's
control is itself on a reused connection and both sweeps see the sizes in the same order, one right after the other.

The padding is harmless headers of the client's own, ``X-Latscope-Pad-1`` … ``X-Latscope-Pad-N``, each at most
:data:`PAD_CHUNK_BYTES` (proxies limit single header lines — nginx: 8 KB — before the whole head); the client's own
headers, credentials included, are sent exactly as given and never altered, shortened or recorded. The control (no
padding) comes first, the sizes then grow, and the sweep stops at the first refusal on either kind of connection (431,
400, 494, or a closed connection): a head limit is the server's, not a connection's.

Where the whole sweep prices a browser-sized head (:func:`latscope.checks.headers.browser_sizes_wanted`), the sizes up
to 8 KB are sent again on both kinds of connection, :data:`SMALL_ROUNDS` times: the browser-sized price is drawn
through each size's fastest request, as a busy host moves one request by as much as 8 KB of a slow scan adds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from latscope.checks.failures import describe
from latscope.checks.headers import BROWSER_MAX_BYTES, HeaderEvidence, HeaderPoint, browser_sizes_wanted
from latscope.checks.samples import RequestSample
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior
from latscope.wire import Client

PROMPT_TOKENS = 16
#: Padding sizes, bytes: the control, a browser's 4 and 8 KB (cookies plus a JWT: what a lean client's finding is
#: priced at), then past the 8 KB where headers count as bloated, then past 16 KB (the default head limit of h11 and
#: uvicorn) …
PAD_BYTES = (0, 4 * 1024, 8 * 1024, 12 * 1024, 24 * 1024, 48 * 1024)
#: … and the quick run's subset.
PAD_BYTES_QUICK = (0, 4 * 1024, 8 * 1024, 12 * 1024, 24 * 1024)
#: Rounds of the sizes up to the browser line's end sent again where the whole sweep prices a browser-sized head.
SMALL_ROUNDS = 2
#: Largest single padding header, bytes (value and name).
PAD_CHUNK_BYTES = 4 * 1024
PAD_NAME = "X-Latscope-Pad"
#: Statuses a server refuses an oversized head with: 431 (RFC 6585), 400 (many proxies), 494 (nginx, internally).
REFUSAL_STATUSES = frozenset({400, 413, 431, 494})


def padding(pad_bytes: int) -> list[tuple[str, str]]:
    """Padding headers totalling about ``pad_bytes`` bytes on the wire (``name: value`` plus CRLF each)."""
    headers: list[tuple[str, str]] = []
    left = pad_bytes
    while left > 0:
        name = f"{PAD_NAME}-{len(headers) + 1}"
        value_len = max(1, min(PAD_CHUNK_BYTES, left) - len(name) - 4)
        headers.append((name, "x" * value_len))
        left -= len(name) + value_len + 4
    return headers


def header_bytes(headers: Sequence[tuple[str, str]]) -> int:
    """Bytes ``headers`` take in an HTTP/1.1 head (``name: value`` plus CRLF each)."""
    return sum(len(name) + len(value) + 4 for name, value in headers)


def pad_sizes(quick: bool) -> tuple[int, ...]:
    """The padding sizes of a run, bytes, in the order sent."""
    return PAD_BYTES_QUICK if quick else PAD_BYTES


def is_refusal(pad: int, sample: RequestSample) -> bool:
    """A padded request the server refused for its head: a refusal status, or a connection closed before a reply."""
    return pad > 0 and (sample.status in REFUSAL_STATUSES or (not sample.ok and sample.status is None))


async def _send_size(ctx: Context, client: Client, pad: int, label: str, new_connection: bool) -> RequestSample:
    spec = ctx.spec(PROMPT_TOKENS, 1)
    spec = dataclasses.replace(spec, headers=[*spec.headers, *padding(pad)])
    kind = "new connection" if new_connection else "reused"
    return await ctx.send(client, spec, label=f"{label} {kind}", new_connection=new_connection)


async def run(ctx: Context, prior: Prior) -> HeaderEvidence:
    """Run the header-size experiment (see the module docstring)."""
    points: list[HeaderPoint] = []
    fresh: list[HeaderPoint] = []
    refused_at: int | None = None
    refused: str | None = None
    async with ctx.client(quickack=True) as client:
        for pad in pad_sizes(ctx.quick):
            for sweep, new_connection in ((fresh, True), (points, False)):
                sample = await _send_size(ctx, client, pad, f"headers +{pad // 1024} KB", new_connection)
                if is_refusal(pad, sample):
                    refused_at, refused = pad, describe(sample)
                    break
                sweep.append(HeaderPoint(pad, sample))
            if refused_at is not None:
                break
        evidence = HeaderEvidence(header_bytes(ctx.headers), tuple(points), refused_at, refused, fresh=tuple(fresh))
        small = [pad for pad in pad_sizes(ctx.quick) if pad <= BROWSER_MAX_BYTES]
        for round_index in range(SMALL_ROUNDS if browser_sizes_wanted(evidence) else 0):
            again: list[HeaderPoint] = []
            fresh_again: list[HeaderPoint] = []
            for pad in small:
                label = f"headers +{pad // 1024} KB again {round_index + 1}"
                fresh_again.append(HeaderPoint(pad, await _send_size(ctx, client, pad, label, True)))
                again.append(HeaderPoint(pad, await _send_size(ctx, client, pad, label, False)))
            evidence = dataclasses.replace(
                evidence,
                small_repeats=(*evidence.small_repeats, *again),
                fresh_small_repeats=(*evidence.fresh_small_repeats, *fresh_again),
            )
    return evidence


EXPERIMENT = Experiment(
    family="headers",
    description=(
        "the same request with 0–48 KB of padding headers, on new and reused connections: does the server's time "
        "grow with header size?"
    ),
    planned_requests=lambda ctx: 2 * len(pad_sizes(ctx.quick)),
    run=run,
)
