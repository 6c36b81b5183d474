"""``gateway-overhead``: a gateway (protocol conversion, a proxy hop) adds time to every request and every chunk.

Mechanism: a gateway that converts each request (HTTP/JSON to gRPC, say) and each message of the streamed answer
back spends its time on the request path: the response head and the first token come later by the per-request
cost, each chunk later still by the per-chunk cost, and when a chunk costs more than the upstream's gap between
chunks, the stream falls behind and every gap grows. Nothing in one server's timings shows it; it shows only against
the same requests sent to the gateway's upstream directly, in the same run (``diagnose URL --direct UPSTREAM_URL``):
absolute times say nothing about a hop, the paired control says what it adds.

Per pair (one request through the gateway, one of the same shape directly, back to back, alternately first), the
differences gateway − direct of: the time to the response head and to the first token, both from the moment the
connection was ready (so a connection opened for one request and not the other does not count); each chunk's
arrival beyond the head's difference (the per-chunk conversion); and the mean gap between chunks. Over the pairs:
the median and a distribution-free interval for it (order statistics; :func:`median_interval`). A finding needs the
first token's median difference to be material (:data:`MATERIAL_FLOOR_MS`, :data:`MATERIAL_SHARE` of the direct
path's own time to it) and the interval to exclude zero (the pairs agree that the gateway is slower); below the
material size the gateway is clear; a material median that the pairs do not agree on is inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

GATEWAY_OVERHEAD_ID = "gateway-overhead"

#: Pairs in which both requests completed that a decision needs: with fewer, the interval of the median is as wide
#: as the data (four pairs: the smallest and largest difference cover the median 87.5 % of the time).
MIN_PAIRS = 4
#: The interval of the median difference covers it at least this often (sign-test order statistics).
INTERVAL_COVERAGE = 0.9
#: An overhead below this, ms, is not worth a hop's redesign: a thin proxy on the same host adds a fraction of a
#: millisecond, a hop to another host in one data centre about one round trip (0.1–0.5 ms).
MATERIAL_FLOOR_MS = 2.0
#: … nor one below this share of the direct path's own time to the first token (the severity rule's medium share).
MATERIAL_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class GatewayOverheadEvidence:
    """The paired comparison of the target (a gateway) with its upstream reached directly (``--direct``).

    Fields:
        gateway_url: the target's base URL.
        direct_url: the upstream's base URL, None when ``--direct`` was not given (nothing was sent).
        gateway_address / direct_address: ``"address:port"`` each path's connection reached (None when unknown):
            two URLs that reach the same listener are one server, and their difference is noise.
        warmup: the first request on each path, ``(gateway, direct)``, not compared (each opens its path's
            connection); None when the experiment sent none.
        pairs: ``(gateway, direct)`` samples of requests of one shape (the same prompt length and ``max_tokens``,
            each with a prompt of its own), sent one after the other on kept-alive connections, in send order; the
            first pair sends the gateway's request first, the next the direct one, and so on alternately.
    """

    gateway_url: str
    direct_url: str | None = None
    gateway_address: str | None = None
    direct_address: str | None = None
    warmup: tuple[RequestSample, RequestSample] | None = None
    pairs: tuple[tuple[RequestSample, RequestSample], ...] = ()


def median_interval(values: Sequence[float], coverage: float = INTERVAL_COVERAGE) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values``: the ``k``-th smallest and ``k``-th largest, for the
    largest ``k`` whose interval covers the median with probability ``coverage`` or more (each value falls on either
    side of the median with probability ½, so the count below it is binomial); the whole range when no ``k`` does.
    None for no values."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None
    k = 1
    while 2 * k + 1 <= n:  # the next candidate, k + 1, still has its two ends in order
        outside = 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # P(fewer than k+1 on one side)
        if 1.0 - outside < coverage:
            break
        k += 1
    return ordered[k - 1], ordered[n - k]


def head_after_setup_ms(sample: RequestSample) -> float | None:
    """Time to the response head from the moment the connection was ready (ms), None when no head came."""
    if sample.ttfb_ms is None:
        return None
    return sample.ttfb_ms - (sample.pool_ms or 0.0) - (sample.setup_paid_ms or 0.0)


def chunk_arrivals_ms(sample: RequestSample) -> list[float]:
    """When each token-bearing chunk arrived, ms from the moment the connection was ready (empty without tokens)."""
    if sample.ttft_after_setup_ms is None:
        return []
    return list(accumulate(sample.itl_ms, initial=sample.ttft_after_setup_ms))


def _diff(gateway: RequestSample, direct: RequestSample, of: Callable[[RequestSample], float | None]) -> float | None:
    a, b = of(gateway), of(direct)
    return None if a is None or b is None else a - b


def chunk_delay_ms(gateway: RequestSample, direct: RequestSample) -> float | None:
    """The median over chunks of how much later each arrived through the gateway, beyond the head's difference
    (ms): the per-chunk conversion. None when either has no chunk or no head."""
    head = _diff(gateway, direct, head_after_setup_ms)
    pairs = list(zip(chunk_arrivals_ms(gateway), chunk_arrivals_ms(direct), strict=False))
    if head is None or not pairs:
        return None
    delays = median([a - b for a, b in pairs])
    return None if delays is None else delays - head


def gap_growth_ms(gateway: RequestSample, direct: RequestSample) -> float | None:
    """How much longer the mean gap between chunks was through the gateway (ms): the stream's span from first to
    last chunk, over the gaps both have (None with fewer than two chunks on either)."""
    a, b = chunk_arrivals_ms(gateway), chunk_arrivals_ms(direct)
    gaps = min(len(a), len(b)) - 1
    if gaps < 1:
        return None
    return ((a[gaps] - a[0]) - (b[gaps] - b[0])) / gaps


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _summary(values: list[float]) -> dict[str, Any]:
    """Median and interval of one difference over the pairs, for the evidence."""
    interval = median_interval(values)
    return {
        "median_ms": _r(median(values)),
        "interval_ms": None if interval is None else [_r(interval[0]), _r(interval[1])],
        "pairs_ms": [_r(v) for v in values],
    }


def _values(pairs: list[tuple[RequestSample, RequestSample]], of: Callable[..., float | None]) -> list[float]:
    return [v for v in (of(g, d) for g, d in pairs) if v is not None]


def check_gateway_overhead(ev: GatewayOverheadEvidence, reference: Reference | None) -> Outcome:
    """Finding when the gateway's requests reach their first token materially later than the same requests sent to
    its upstream, in every pair's agreement (see the module docstring); cost = the median difference per request."""
    if ev.direct_url is None:
        return NotTested(
            GATEWAY_OVERHEAD_ID,
            "no upstream to compare with: pass --direct UPSTREAM_URL (the server the gateway forwards to, reachable "
            "from here) and the same requests go to both; the difference is what the gateway adds",
        )
    if ev.direct_url == ev.gateway_url:
        return NotTested(GATEWAY_OVERHEAD_ID, f"--direct names the target itself ({ev.direct_url}), not its upstream")
    if ev.warmup is None:
        return NotTested(GATEWAY_OVERHEAD_ID, "the comparison sent nothing")
    for name, sample in zip(("the gateway", "the direct upstream"), ev.warmup, strict=True):
        if not sample.ok:
            return NotTested(GATEWAY_OVERHEAD_ID, f"{name} did not answer: {failures.describe(sample)}")
    if ev.gateway_address is not None and ev.gateway_address == ev.direct_address:
        return NotTested(
            GATEWAY_OVERHEAD_ID,
            f"the target and --direct reached the same server ({ev.gateway_address}): --direct must name the "
            "gateway's upstream, another listener",
        )
    samples = [s for pair in ev.pairs for s in pair]
    if failures.rate_limited(samples):
        return NotTested(GATEWAY_OVERHEAD_ID, "requests of the comparison were refused (429): the pairs do not match")
    pairs = [(g, d) for g, d in ev.pairs if g.ok and d.ok]
    ttft = _values(pairs, lambda g, d: _diff(g, d, lambda s: s.ttft_after_setup_ms))
    if len(ttft) < MIN_PAIRS:
        reason = failures.summarise(samples) or "too few requests completed"
        return NotTested(GATEWAY_OVERHEAD_ID, f"the comparison could not measure: {reason}")
    head = _values(pairs, lambda g, d: _diff(g, d, head_after_setup_ms))
    e2e = _values(pairs, lambda g, d: _diff(g, d, lambda s: s.e2e_after_setup_ms))
    chunk = _values(pairs, chunk_delay_ms)
    gaps = _values(pairs, gap_growth_ms)
    direct_ttft = median([d.ttft_after_setup_ms for _, d in pairs if d.ttft_after_setup_ms is not None]) or 0.0
    threshold = max(MATERIAL_FLOOR_MS, MATERIAL_SHARE * direct_ttft)
    overhead = median(ttft) or 0.0
    low, high = median_interval(ttft) or (0.0, 0.0)
    chunks = median([float(len(chunk_arrivals_ms(g))) for g, _ in pairs]) or 0.0
    evidence: dict[str, Any] = {
        "gateway_url": ev.gateway_url,
        "direct_url": ev.direct_url,
        "gateway_address": ev.gateway_address,
        "direct_address": ev.direct_address,
        "pairs": len(pairs),
        "interval_coverage": INTERVAL_COVERAGE,
        "direct_ttft_ms": _r(direct_ttft),
        "threshold_ms": _r(threshold),
        "ttft_difference": _summary(ttft),
        "head_difference": _summary(head),
        "e2e_difference": _summary(e2e),
        "chunk_delay": _summary(chunk),
        "gap_growth": _summary(gaps),
        "chunks_per_request": chunks,
    }
    text = (
        f"through the gateway the first token came {overhead:.1f} ms later (median of {len(ttft)} pairs, "
        f"{INTERVAL_COVERAGE:.0%} interval {low:.1f} to {high:.1f} ms)"
    )
    if overhead < threshold:
        return Clear(GATEWAY_OVERHEAD_ID, f"{text}: below the {threshold:.1f} ms that would matter", evidence)
    if low <= 0.0:
        return Inconclusive(
            GATEWAY_OVERHEAD_ID,
            f"{text}: material, but the pairs disagree (the interval includes 0); run again when the path and "
            "both servers are quieter",
            evidence,
        )
    per_chunk = median(chunk)
    growth = median(gaps)
    detail = "".join(
        (
            f"; the response head {median(head) or 0.0:.1f} ms later" if head else "",
            f"; each streamed chunk a further {per_chunk:.2f} ms" if per_chunk is not None else "",
            f", each gap between chunks {growth:+.2f} ms" if growth is not None else "",
        )
    )
    return costed_finding(
        GATEWAY_OVERHEAD_ID,
        overhead,
        reference,
        cost_basis=(
            f"median ms per request that the first token takes longer through the gateway than directly from its "
            f"upstream, over {len(ttft)} paired requests"
        ),
        evidence=evidence,
        rule=(
            f"{text}{detail}: above {threshold:.1f} ms (the larger of {MATERIAL_FLOOR_MS:g} ms and "
            f"{MATERIAL_SHARE:.0%} of the direct path's {direct_ttft:.1f} ms), with its interval above 0: the pairs "
            "agree"
        ),
        confidence=Confidence.HIGH if low >= threshold else Confidence.MEDIUM,
    )
