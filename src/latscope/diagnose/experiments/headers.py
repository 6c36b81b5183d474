"""The header-size experiment: the same short request (``max_tokens`` 1) with growing padding headers, on one reused
connection.

The padding is harmless headers of the client's own, ``X-Latscope-Pad-1`` … ``X-Latscope-Pad-N``, each at most
:data:`PAD_CHUNK_BYTES` (proxies limit single header lines — nginx: 8 KB — before the whole head); the client's own
headers, credentials included, are sent exactly as given and never altered, shortened or recorded. The control (no
padding) comes first, the sizes then grow, and the sweep stops at the first refusal (431, 400, 494, or a closed
connection).
"""

from __future__ import annotations

import dataclasses

from latscope.checks.evidence import HeaderEvidence, HeaderPoint
from latscope.checks.failures import describe
from latscope.diagnose.context import Context
from latscope.diagnose.experiments.base import Experiment, Prior

PROMPT_TOKENS = 16
#: Padding sizes, bytes: the control, then past the 8 KB where headers count as bloated, then past 16 KB (the
#: default head limit of h11 and uvicorn) …
PAD_BYTES = (0, 12 * 1024, 24 * 1024, 48 * 1024)
#: … and the quick run's subset.
PAD_BYTES_QUICK = (0, 12 * 1024, 24 * 1024)
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


def header_bytes(headers: list[tuple[str, str]]) -> int:
    """Bytes ``headers`` take in an HTTP/1.1 head (``name: value`` plus CRLF each)."""
    return sum(len(name) + len(value) + 4 for name, value in headers)


async def run(ctx: Context, prior: Prior) -> HeaderEvidence:
    """Run the header-size experiment (see the module docstring)."""
    points: list[HeaderPoint] = []
    refused_at: int | None = None
    refused: str | None = None
    async with ctx.client(quickack=True) as client:
        for pad in PAD_BYTES_QUICK if ctx.quick else PAD_BYTES:
            spec = ctx.spec(PROMPT_TOKENS, 1)
            spec = dataclasses.replace(spec, headers=[*spec.headers, *padding(pad)])
            sample = await ctx.send(client, spec, label=f"headers +{pad // 1024} KB")
            if pad and (sample.status in REFUSAL_STATUSES or (not sample.ok and sample.status is None)):
                refused_at, refused = pad, describe(sample)
                break
            points.append(HeaderPoint(pad, sample))
    return HeaderEvidence(header_bytes(ctx.headers), tuple(points), refused_at, refused)


EXPERIMENT = Experiment(
    family="headers",
    description="the same request with 0–48 KB of padding headers: does the server's time grow with header size?",
    planned_requests=lambda ctx: len(PAD_BYTES_QUICK if ctx.quick else PAD_BYTES),
    run=run,
)
