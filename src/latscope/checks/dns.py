"""The DNS check: ``slow-dns``.

Its evidence is the connection experiment's own new connections (no request of its own): each resolved the target's
name by itself (``getaddrinfo``, the timeline's dns phase) right before its TCP connect, and the run had resolved the
same name moments before (model discovery, first contact, baseline), so every one of these lookups is a repeat that a
cache on the client's host would answer at once. The control is the connect measured on the same connections: one
round trip to the server itself.

A lookup that costs at least that round trip means the resolver is as far away as the server (or farther) and is
asked again for every new connection: each one then pays at least two round trips before its request is written
instead of one. glibc's stub resolver keeps no cache of its own, so a client host without a caching resolver (nscd,
systemd-resolved, dnsmasq) pays that on every connection it opens.
"""

from __future__ import annotations

from typing import Any

from latscope.checks import failures
from latscope.checks.connection import ConnectionEvidence
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, percentile
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

DNS_ID = "slow-dns"

#: A lookup answered on the client's own host (``/etc/hosts``, nscd, a caching stub resolver on loopback) takes less
#: than this (ms), ``loop.getaddrinfo``'s worker thread included (glibc asks A and AAAA over UDP). A query that leaves
#: the host costs a round trip to a resolver and its work on top. Below it a lookup is never slow, however short the
#: connect it is compared with (on loopback a connect takes a fraction of a millisecond).
LOCAL_ANSWER_MS = 2.0

#: A lookup this many of the connection's own TCP connects (one round trip to the server) or more makes resolution
#: at least half of a plain connection's setup: the name costs as much as reaching the server.
CONNECT_ROUND_TRIPS = 1.0

#: Costs are taken at this percentile of the lookups (and of the connects, the control): a busy host only ever adds
#: time to a lookup (the worker thread scheduled late), so the lower quartile is the resolver's own cost.
LOOKUP_PERCENTILE = 25.0

#: A repeated lookup faster than this share of the first one was answered from a cache (a cache answers in
#: microseconds what a resolver needs a round trip for; within a factor of two they are the same path).
CACHED_SHARE = 0.5


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _lookups(ev: ConnectionEvidence) -> list[RequestSample]:
    """The new connections that resolved the name, in the order the experiment opened them."""
    samples = (*ev.sequential, *(s for _, s in ev.idle), *ev.fresh)
    return [s for s in samples if s.ok and s.reused is False and s.dns_ms is not None and s.connect_ms is not None]


def check_slow_dns(ev: ConnectionEvidence, reference: Reference | None) -> Outcome:
    """Finding when resolving the target's name costs each new connection at least a round trip to the server itself
    (its own TCP connect, measured on the same connections) and more than an answer from the client's host could
    take (:data:`LOCAL_ANSWER_MS`): the lookups go to a distant resolver, and repeated ones are not answered from a
    cache. Clear when they are fast (hosts file, a cache); not tested for an IP-literal target (nothing to resolve).

    The cost is ms per new connection: a client that reuses its connections pays it once per connection it opens.
    """
    host = ev.host or "the target's host"
    if ev.host_is_ip:
        return NotTested(DNS_ID, f"the target is an IP address ({host}): connections to it resolve no name")
    samples = (*ev.sequential, *(s for _, s in ev.idle), *ev.fresh)
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(DNS_ID, f"the target misbehaved during the connection experiment: {broken}")
    resolved = _lookups(ev)
    if not resolved:
        reason = failures.summarise(samples, len(samples))
        detail = f": {reason}" if reason else ""
        return NotTested(DNS_ID, f"no new connection resolved {host}{detail}")
    lookups = [s.dns_ms for s in resolved if s.dns_ms is not None]
    connects = [s.connect_ms for s in resolved if s.connect_ms is not None]
    lookup_ms = percentile(lookups, LOOKUP_PERCENTILE)
    connect_ms = percentile(connects, LOOKUP_PERCENTILE)
    assert lookup_ms is not None and connect_ms is not None  # one value at least: every sample has both
    first_ms, repeats = lookups[0], lookups[1:]
    repeat_ms = median(repeats)
    threshold_ms = max(CONNECT_ROUND_TRIPS * connect_ms, LOCAL_ANSWER_MS)
    # cached: the repeats were answered faster than the first; not cached: as slow as a slow first; None: the first
    # was fast already (a name the run's earlier lookups had put in a cache, or a fast resolver): nothing to compare
    cached: bool | None = None
    if repeat_ms is not None:
        if repeat_ms < CACHED_SHARE * first_ms:
            cached = True
        elif first_ms >= threshold_ms:
            cached = False
    evidence: dict[str, Any] = {
        "host": ev.host,
        "lookups": len(lookups),
        "lookup_ms": _round(lookup_ms),
        "lookup_ms_p50": _round(median(lookups)),
        "lookups_ms": [round(v, 3) for v in lookups],
        "connect_ms": _round(connect_ms),
        "connects_ms": [round(v, 3) for v in connects],
        "first_lookup_ms": _round(first_ms),
        "repeated_lookup_ms_p50": _round(repeat_ms),
        "repeats_cached": cached,
        "threshold_ms": _round(threshold_ms),
        "rtt_ms": _round(median([s.rtt_ms for s in resolved if s.rtt_ms is not None])),
    }
    if lookup_ms < threshold_ms:
        if lookup_ms < LOCAL_ANSWER_MS:
            why = (
                f"under the {LOCAL_ANSWER_MS:g} ms a query leaving this host takes: answered locally (hosts file, "
                "a cache)"
            )
        else:
            why = f"under the connection's own TCP connect ({connect_ms:.2f} ms, one round trip to the server)"
        cache = " (repeats faster than the first: cached)" if cached else ""
        count = f"{len(lookups)} lookup{'s' if len(lookups) != 1 else ''}"
        return Clear(
            DNS_ID,
            f"{count} of {host} took {lookup_ms:.2f} ms (lower quartile){cache}, {why}",
            evidence,
        )
    if len(lookups) < 2:
        return Inconclusive(
            DNS_ID,
            f"one lookup of {host} took {lookup_ms:.2f} ms, at least the connect ({connect_ms:.2f} ms), but no "
            "repeat was measured to tell a slow resolver from a cold cache; run again",
            evidence,
        )
    assert repeat_ms is not None  # two lookups at least
    above = sum(1 for v in lookups if v >= threshold_ms)
    cache_note = (
        f"repeated lookups of the same name were not answered from a cache (median {repeat_ms:.2f} ms vs the first's "
        f"{first_ms:.2f} ms)"
        if not cached
        else f"the repeats are faster than the first ({repeat_ms:.2f} vs {first_ms:.2f} ms) yet still slow"
    )
    return costed_finding(
        DNS_ID,
        lookup_ms,
        reference,
        cost_basis=(
            f"ms per new connection resolving {host} (getaddrinfo, lower quartile of {len(lookups)} lookups, each a "
            "repeat of a name this run had already resolved); a client that reuses its connections pays it once per "
            "connection it opens"
        ),
        evidence=evidence,
        rule=(
            f"{above} of {len(lookups)} lookups of {host} took at least the connection's own TCP connect "
            f"({connect_ms:.2f} ms, one round trip to the server) and {LOCAL_ANSWER_MS:g} ms, what an answer from this "
            f"host stays under: the resolver is as far as the server or farther; {cache_note}"
        ),
        confidence=Confidence.HIGH if above == len(lookups) else Confidence.MEDIUM,
    )
