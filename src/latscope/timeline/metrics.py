"""Metrics derived from a :class:`~latscope.timeline.model.Timeline`, in milliseconds (float).

Every function returns ``None`` when the marks it needs are missing (a reused connection has no ``dns_ms``; a failed
request may have no ``ttft_ms``), never a made-up zero.

Definitions (all differences of monotonic-ns marks, divided by 1e6):

=================  =============================================================================================
``client_queue``   started − scheduled: time a load generator's request waited inside the client before starting
``pool``           connection_ready − started, minus dns/connect/tls: waiting for a pooled connection
``dns``            dns_end − dns_start
``connect``        connect_end − connect_start (TCP handshake)
``tls``            tls_end − tls_start
``send``           send_end − send_start: writing headers and body (upload time)
``wait``           first_byte − send_end: TTFB after the request was written (server think time + one RTT)
``ttfb``           first_byte − started
``ttft``           first_token − started: time to the first token-bearing event of any kind (text, reasoning,
                   tool-call arguments), connection setup included
``ttft_text``      first_text − started: time to the first visible-text token (after ``ttft`` when the model
                   reasons or calls a tool first; None when no text came)
``e2e``            ended − started
``stream``         ended − first_byte
``itl``            gaps between consecutive token-bearing events of the same kind and choice (one value per gap;
                   coalesced events give 0 gaps): the pause while a model switches from reasoning to text is not
                   an inter-token gap of either
``tpot``           (last_token − first_token) ÷ (tokens − 1): mean time per output token after the first
``read_delay``     per kernel-stamped read, user-space stamp − kernel receive stamp: the client's own scheduling
                   delay, measured (only where the connection read kernel stamps)
=================  =============================================================================================
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from typing import Literal

from latscope.timeline.model import TOKEN_KINDS, EventKind, Timeline
from latscope.timeline.percentile import percentile
from latscope.units import NS_PER_MS


def _ms(end_ns: int | None, start_ns: int | None) -> float | None:
    if end_ns is None or start_ns is None:
        return None
    return (end_ns - start_ns) / NS_PER_MS


def client_queue_ms(t: Timeline) -> float | None:
    """Time between the scheduled send time and the actual start (load generation only)."""
    return _ms(t.started_ns, t.scheduled_ns)


def retry_ms(t: Timeline) -> float:
    """Time the logical request spent before this attempt started: its earlier attempts and the waits after each
    (0 without retries)."""
    return (t.started_ns - t.logical_started_ns) / NS_PER_MS


def retry_wait_ms(t: Timeline) -> float:
    """The part of :func:`retry_ms` spent waiting between attempts (backoff, Retry-After)."""
    return sum(a.wait_ns for a in t.retries) / NS_PER_MS


def dns_ms(t: Timeline) -> float | None:
    """DNS resolution time."""
    return _ms(t.dns_end_ns, t.dns_start_ns)


def connect_ms(t: Timeline) -> float | None:
    """TCP connect time."""
    return _ms(t.connect_end_ns, t.connect_start_ns)


def tls_ms(t: Timeline) -> float | None:
    """TLS handshake time."""
    return _ms(t.tls_end_ns, t.tls_start_ns)


def setup_ms(t: Timeline) -> float | None:
    """Time to a usable connection: connection_ready − started (pool wait + dns + connect + tls)."""
    return _ms(t.connection_ready_ns, t.started_ns)


def pool_ms(t: Timeline) -> float | None:
    """Time waiting for the pool: setup minus the dns, connect and tls phases this request paid for."""
    setup = setup_ms(t)
    if setup is None:
        return None
    paid = sum(v for v in (dns_ms(t), connect_ms(t), tls_ms(t)) if v is not None)
    return max(0.0, setup - paid)


def send_ms(t: Timeline) -> float | None:
    """Time to write the request (headers and body)."""
    return _ms(t.send_end_ns, t.send_start_ns)


def wait_ms(t: Timeline) -> float | None:
    """Time from the request fully written to the first response byte (TTFB after upload)."""
    return _ms(t.first_byte_ns, t.send_end_ns)


def ttfb_ms(t: Timeline) -> float | None:
    """Time from start to the first response byte."""
    return _ms(t.first_byte_ns, t.started_ns)


def ttft_ms(t: Timeline) -> float | None:
    """Time from start to the first token-bearing event."""
    return _ms(t.first_token_ns, t.started_ns)


def ttft_text_ms(t: Timeline) -> float | None:
    """Time from start to the first visible-text token (``first_text_ns``)."""
    return _ms(t.first_text_ns, t.started_ns)


def e2e_ms(t: Timeline) -> float | None:
    """Time from start to the end of the response."""
    return _ms(t.ended_ns, t.started_ns)


def stream_ms(t: Timeline) -> float | None:
    """Time from the first response byte to the end."""
    return _ms(t.ended_ns, t.first_byte_ns)


def output_tokens(t: Timeline) -> int:
    """Output tokens: the server's ``usage.completion_tokens`` when reported, else the tokens the events carried."""
    if t.usage is not None and t.usage.completion_tokens is not None:
        return t.usage.completion_tokens
    return sum(e.tokens for e in t.events if e.kind in TOKEN_KINDS)


TokenCountSource = Literal["usage", "token_ids", "events"]
"""Where a timeline's output-token count comes from: the server's ``usage``, the token ids it listed with each event
(vLLM's ``return_token_ids``), or the stream's token-bearing events (one token each, empty text included)."""


def token_count_source(t: Timeline) -> TokenCountSource:
    """Which count :func:`output_tokens` used (see :data:`TokenCountSource`)."""
    if t.usage is not None and t.usage.completion_tokens is not None:
        return "usage"
    return "token_ids" if t.tokens_from_ids else "events"


def itl_ms(t: Timeline, kind: EventKind | None = None) -> list[float]:
    """Every inter-token gap in ms (not a mean), in arrival order of the later event; ``kind`` keeps only the gaps
    of that kind. Consecutive token-bearing events of the same kind and choice make one gap each, except that an
    event known to carry ``k`` > 1 tokens (vLLM's ``return_token_ids`` lists them; it merges tokens into one event
    when its API server falls behind the engine) stands for ``k`` tokens generated over the gap before it: ``k``
    gaps of a ``k``-th of it each, as vLLM's own benchmark counts them. The extra tokens of a first event add no
    gap (they came within the TTFT)."""
    streams: defaultdict[tuple[EventKind, int], list[tuple[int, int]]] = defaultdict(list)
    for e in t.events:
        if e.kind in TOKEN_KINDS and (kind is None or e.kind is kind):
            streams[e.kind, e.choice].append((e.at_ns, e.tokens))
    gaps: list[tuple[int, float]] = []
    for marks in streams.values():
        for (a, _), (b, tokens) in itertools.pairwise(marks):
            gap = (b - a) / NS_PER_MS
            if tokens > 1:
                gaps.extend([(b, gap / tokens)] * tokens)
            else:
                gaps.append((b, gap))
    if len(streams) > 1:
        gaps.sort(key=lambda pair: pair[0])  # stable: gaps ending in one read keep their order
    return [gap for _, gap in gaps]


def tpot_ms(t: Timeline) -> float | None:
    """Mean time per output token after the first, from the first and last token marks and the token count."""
    if t.first_token_ns is None or t.last_token_ns is None:
        return None
    tokens = output_tokens(t)
    if tokens < 2:
        return None
    return (t.last_token_ns - t.first_token_ns) / NS_PER_MS / (tokens - 1)


def events_per_read(t: Timeline) -> list[int]:
    """For each read that completed at least one event, how many events it completed (1 = no coalescing)."""
    counts = Counter(e.read_index for e in t.events)
    return [counts[i] for i in sorted(counts)]


def token_events_per_read(t: Timeline) -> list[int]:
    """Like :func:`events_per_read`, counting token-bearing events only."""
    counts = Counter(e.read_index for e in t.events if e.kind in TOKEN_KINDS)
    return [counts[i] for i in sorted(counts)]


def read_delays_ms(t: Timeline) -> list[float]:
    """The client's own scheduling delay on each kernel-stamped read, ms: user-space stamp − kernel receive stamp
    (how long the data waited in the kernel before the event loop read it). Empty without kernel stamps."""
    return [(r.user_ns - r.at_ns) / NS_PER_MS for r in t.reads if r.user_ns is not None]


def phases_ms(t: Timeline) -> dict[str, float | None]:
    """The waterfall phases of one request, in order, in ms (None where the phase did not happen)."""
    return {
        "client_queue": client_queue_ms(t),
        "pool": pool_ms(t),
        "dns": dns_ms(t),
        "connect": connect_ms(t),
        "tls": tls_ms(t),
        "send": send_ms(t),
        "wait": wait_ms(t),
        "ttfb": ttfb_ms(t),
        "ttft": ttft_ms(t),
        "ttft_text": ttft_text_ms(t),
        "stream": stream_ms(t),
        "e2e": e2e_ms(t),
        "tpot": tpot_ms(t),
    }


def summary(t: Timeline) -> dict[str, object]:
    """A flat dict of the derived metrics (for tables, JSON and DataFrames)."""
    gaps = itl_ms(t)
    per_read = token_events_per_read(t)
    delays = read_delays_ms(t)
    out: dict[str, object] = {f"{k}_ms": v for k, v in phases_ms(t).items()}
    out.update(
        {
            "output_tokens": output_tokens(t),
            "tokens_counted_by": token_count_source(t),
            "itl_count": len(gaps),
            "itl_max_ms": max(gaps) if gaps else None,
            "reads": len(t.reads),
            "events": len(t.events),
            "max_token_events_per_read": max(per_read) if per_read else None,
            "stamps": t.connection.stamps if t.connection else None,
            "read_delay_p50_ms": percentile(delays, 50),
            "read_delay_p99_ms": percentile(delays, 99),
            "reused": t.connection.reused if t.connection else None,
            "status": t.status,
            "error_phase": str(t.error.phase) if t.error else None,
        }
    )
    return out
