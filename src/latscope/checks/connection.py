"""Connection checks: ``no-connection-reuse``, ``tls-no-resumption``, ``http2-not-negotiated``.

All three are structural: each new connection (or each request that waits for one) pays round trips, so their cost
is measured here but scales with the network's RTT, which the evidence reports (TCP_INFO) next to the cost. Their
severity is at least medium (see :mod:`latscope.checks.severity`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from latscope.checks import failures
from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import median, percentile
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Outcome

REUSE_ID = "no-connection-reuse"
RESUMPTION_ID = "tls-no-resumption"
HTTP2_ID = "http2-not-negotiated"

#: Round trips a new connection costs before the request can be written: TCP's handshake, plus TLS 1.3's one or
#: TLS 1.2's two (RFC 8446 §2, RFC 5246 §7.3). Used to say what the measured loopback cost becomes on a real network.
TCP_ROUND_TRIPS = 1
TLS_ROUND_TRIPS = {"TLSv1.3": 1, "TLSv1.2": 2}

#: Round trips a resumed TLS handshake still takes (TLS 1.3 with a ticket, TLS 1.2's abbreviated handshake): what
#: resumption saves is the full handshake's time beyond them (the certificate, its verification, TLS 1.2's extra
#: round trip), not the handshake itself (RFC 8446 §2.2, RFC 5246 §7.3).
RESUMED_ROUND_TRIPS = 1

#: An RTT to say what a round trip costs on a real network: a client and its API in different regions (ms).
WAN_RTT_MS = 50.0

#: A round trip this long (ms) or longer is the network's, not the host's: it is named where it explains a close.
DISTANT_RTT_MS = 10.0

#: Setup costs are taken at this percentile of the new connections: a busy host only ever adds time to a connect or a
#: handshake (a callback run late), so a low percentile is the connection's own cost, stable from run to run, where
#: a median of a handful follows the host's load.
SETUP_PERCENTILE = 25.0

#: Refused resumptions needed to cost the full handshake from them alone (else every full handshake counts).
MIN_REFUSED_HANDSHAKES = 2

#: A pool wait below this (ms) is the pool's own bookkeeping, not a request queued behind another one.
QUEUED_MIN_POOL_MS = 1.0


@dataclass(frozen=True, slots=True)
class ConnectionEvidence:
    """The connection experiment.

    Fields:
        tls: the target is https.
        sequential: three (or more) requests one after another on one client pool, in order.
        fresh: requests forced onto new connections (``new_connection``), each offered the saved TLS session.
        offered_alpn: the ALPN protocols the client offered (empty without TLS).
        concurrency: the HTTP/1.1-under-concurrency measurement (None when not run: plain HTTP, or h2 negotiated).
        idle: ``(pause_s, sample)``: a request sent on the same pool after the pool sat idle ``pause_s`` seconds (a
            user reading an answer): does the connection survive the pause?
        host: the target's host as its URL names it (a DNS name, or an IP literal); empty when not recorded.
        host_is_ip: ``host`` is an IPv4 or IPv6 address, so no connection resolves a name (no dns phase).

    Every new connection among ``sequential``, ``idle`` and ``fresh`` resolved ``host`` by itself (its ``dns_ms``,
    next to its own ``connect_ms``): these lookups, in that order, are the ``slow-dns`` evidence.
    """

    tls: bool
    sequential: tuple[RequestSample, ...]
    fresh: tuple[RequestSample, ...] = ()
    offered_alpn: tuple[str, ...] = ()
    concurrency: ConcurrencyEvidence | None = None
    idle: tuple[tuple[float, RequestSample], ...] = ()
    host: str = ""
    host_is_ip: bool = False


@dataclass(frozen=True, slots=True)
class ConcurrencyEvidence:
    """Bursts of requests sent at once through a pool of ``connections_per_origin`` HTTP/1.1 connections (what a
    browser does: 6 per host): ``rounds`` holds each burst's samples in send order."""

    connections_per_origin: int
    rounds: tuple[tuple[RequestSample, ...], ...]

    @property
    def samples(self) -> tuple[RequestSample, ...]:
        """Every request of every burst."""
        return tuple(s for burst in self.rounds for s in burst)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _rtt_ms(samples: tuple[RequestSample, ...]) -> float | None:
    return median([s.rtt_ms for s in samples if s.ok and s.rtt_ms is not None])


def _round_trips(samples: tuple[RequestSample, ...]) -> int:
    version = next((s.tls_version for s in samples if s.tls_version), None)
    if version is None:
        return TCP_ROUND_TRIPS
    return TCP_ROUND_TRIPS + TLS_ROUND_TRIPS.get(version, 2)


def _new_connections(ev: ConnectionEvidence) -> list[RequestSample]:
    return [s for s in (*ev.sequential, *ev.fresh) if s.ok and s.reused is False and s.setup_paid_ms is not None]


def _rtt_note(rtt_ms: float | None, round_trips: int) -> str:
    wan = f"{round_trips * WAN_RTT_MS:.0f} ms at a {WAN_RTT_MS:.0f} ms RTT"
    if rtt_ms is None:
        return f"{round_trips} round trip(s) per new connection: {wan}"
    total = round_trips * rtt_ms
    return f"{round_trips} round trip(s) per new connection: {total:.2f} ms at this RTT ({rtt_ms:.3f} ms), {wan}"


def check_connection_reuse(ev: ConnectionEvidence, reference: Reference | None) -> Outcome:
    """Finding when requests on one client pool do not share a connection: sent back to back (no keep-alive), or
    after the pool sat idle for a pause a user makes between prompts (a keep-alive timeout shorter than that).

    Mechanism: a client that keeps its pool gets its next request onto the same connection unless the server (or a
    proxy) closed it: ``Connection: close``, HTTP/1.0, or an idle timeout that ran out during the pause.
    """
    sequential = ev.sequential
    later = [s for s in sequential[1:] if s.ok]
    if not sequential or not sequential[0].ok or not later:
        reason = failures.summarise(sequential, len(sequential)) or "fewer than two sequential requests completed"
        return NotTested(REUSE_ID, f"the sequential requests did not complete: {reason}")
    idle_samples = [s for _, s in ev.idle]
    broken = failures.too_many_failed((*sequential, *ev.fresh, *idle_samples))
    if broken:
        return NotTested(REUSE_ID, f"the target misbehaved during the connection experiment: {broken}")
    new = _new_connections(ev) + [s for s in idle_samples if s.ok and s.reused is False and s.setup_paid_ms]
    setups = [s.setup_paid_ms for s in new if s.setup_paid_ms is not None]
    cost = percentile(setups, SETUP_PERCENTILE)
    closed = [s for s in later if not s.reused]
    idle_ok = [(pause, s) for pause, s in ev.idle if s.ok]
    idle_closed = sorted(pause for pause, s in idle_ok if s.reused is False)
    idle_kept = sorted(pause for pause, s in idle_ok if s.reused)
    rtt = _rtt_ms(sequential)
    trips = _round_trips(sequential)
    evidence: dict[str, Any] = {
        "requests": len(sequential),
        "reused": [s.reused for s in sequential],
        "connection_ids": [s.connection_id for s in sequential],
        "http_version": sequential[0].http_version,
        "response_connection_close": any(s.response_close for s in (*sequential, *idle_samples) if s.ok),
        "idle_pauses_s": [pause for pause, _ in ev.idle],
        "reused_after_idle": [s.reused for _, s in ev.idle],
        "new_connection_ms": _round(cost),
        "new_connection_ms_p50": _round(median(setups)),
        "new_connections_measured": len(new),
        "rtt_ms": _round(rtt),
        "round_trips_per_new_connection": trips,
    }
    if not closed and not idle_closed:
        first_id = sequential[0].connection_id
        kept = f" and after {max(idle_kept):g} s idle" if idle_kept else ""
        detail = f"; a new connection costs {cost:.2f} ms here (dns+connect+tls)" if cost is not None else ""
        return Clear(REUSE_ID, f"requests 2–{len(sequential)}{kept} reused connection #{first_id}{detail}", evidence)
    if cost is None:
        return Inconclusive(
            REUSE_ID,
            "requests did not reuse their connection, but no new connection's setup was measured; run again",
            evidence,
        )
    network = _rtt_note(rtt, trips)
    if closed:
        why = []
        if evidence["response_connection_close"]:
            why.append("the server answered 'Connection: close'")
        if sequential[0].http_version == "HTTP/1.0":
            why.append("the server speaks HTTP/1.0")
        if not why:
            why.append("the server closed the connection after the response")
            if rtt is not None and rtt >= DISTANT_RTT_MS:
                why.append(
                    f"it saw at least a round trip ({rtt:.1f} ms) between its response and the next request: a "
                    "keep-alive timeout shorter than that closes every connection from this distance"
                )
        rule = (
            f"{len(closed)} of {len(later)} requests sent right after another on the same client pool opened a new "
            f"connection ({'; '.join(why)})"
        )
        basis = f"ms per request for a new connection (dns+connect+tls, lower quartile of {len(new)} measured here)"
        confidence = Confidence.MEDIUM if len(closed) < len(later) else Confidence.HIGH
    else:
        shortest = idle_closed[0]
        below = [pause for pause in idle_kept if pause < shortest]
        window = f"between {max(below):g} and {shortest:g} s" if below else f"under {shortest:g} s"
        rule = (
            f"back-to-back requests reused the connection, but after {shortest:g} s idle the server had closed it: "
            f"its keep-alive timeout is {window}, shorter than a user's pause between prompts"
        )
        basis = (
            f"ms per request that follows a pause of {shortest:g} s or more, for a new connection (dns+connect+tls, "
            f"lower quartile of {len(new)} measured here)"
        )
        confidence = Confidence.HIGH
    return costed_finding(
        REUSE_ID,
        cost,
        reference,
        structural=True,
        cost_basis=f"{basis}; {network}",
        evidence=evidence,
        rule=rule,
        confidence=confidence,
    )


def check_tls_resumption(ev: ConnectionEvidence, reference: Reference | None) -> Outcome:
    """Finding when new TLS connections offered the saved session and the server never resumed it."""
    if not ev.tls:
        return NotTested(RESUMPTION_ID, "the target is plain HTTP: there is no TLS session to resume")
    samples = (*ev.sequential, *ev.fresh)
    broken = failures.too_many_failed(samples)
    if broken:
        return NotTested(RESUMPTION_ID, f"the target misbehaved during the connection experiment: {broken}")
    offered = [s for s in samples if s.ok and s.reused is False and s.tls_offered]
    if not offered:
        reason = failures.summarise(samples, len(samples))
        detail = f": {reason}" if reason else " (the server sent no session to save)"
        return NotTested(RESUMPTION_ID, f"no new connection could offer a saved TLS session{detail}")
    full = [s.tls_ms for s in samples if s.ok and s.reused is False and not s.tls_resumed and s.tls_ms is not None]
    resumed = [s.tls_ms for s in offered if s.tls_resumed and s.tls_ms is not None]
    full_ms = percentile(full, SETUP_PERCENTILE)
    resumed_ms = percentile(resumed, SETUP_PERCENTILE)
    rtt = _rtt_ms(samples)
    version = next((s.tls_version for s in samples if s.tls_version), None)
    evidence: dict[str, Any] = {
        "tls_version": version,
        "sessions_offered": len(offered),
        "sessions_resumed": len(resumed),
        "full_handshake_ms": _round(full_ms),
        "resumed_handshake_ms": _round(resumed_ms),
        "full_handshake_ms_p50": _round(median(full)),
        "rtt_ms": _round(rtt),
    }
    if resumed:
        saving = "" if full_ms is None else f" vs {full_ms:.2f} ms for a full one"
        return Clear(
            RESUMPTION_ID,
            f"{len(resumed)} of {len(offered)} new connections resumed the saved session "
            f"(handshake {resumed_ms:.2f} ms{saving})",
            evidence,
        )
    # what resumption would have spared is the handshakes of the connections that offered a session: the first,
    # cold connection (nothing to offer, first use of the client's TLS context) is counted only when too few did
    refused = [s.tls_ms for s in offered if s.tls_ms is not None]
    if len(refused) >= MIN_REFUSED_HANDSHAKES:
        full, full_ms = refused, percentile(refused, SETUP_PERCENTILE)
        evidence["full_handshake_ms"] = _round(full_ms)
        evidence["full_handshake_ms_p50"] = _round(median(full))
    if full_ms is None:
        return Inconclusive(RESUMPTION_ID, "no handshake time was measured; run again", evidence)
    extra_trips = 1 if version == "TLSv1.2" else 0
    network = (
        "and with TLS 1.2 one round trip" if extra_trips else "(TLS 1.3: the same round trips, and 0-RTT data needs it)"
    )
    # a resumed handshake would still take its round trip: what resumption saves is the rest
    unavoidable = RESUMED_ROUND_TRIPS * (rtt or 0.0)
    spared = max(0.0, full_ms - unavoidable)
    evidence["saving_ms"] = _round(spared)
    return costed_finding(
        RESUMPTION_ID,
        spared,
        reference,
        structural=True,
        cost_basis=(
            f"ms per new connection of TLS handshake beyond the {RESUMED_ROUND_TRIPS} round trip a resumed one still "
            f"takes: the full handshake (lower quartile of {len(full)}: {full_ms:.2f} ms) less {unavoidable:.2f} ms "
            f"at this RTT, what resumption saves at most (it skips the certificate exchange and its verification "
            f"{network}; its own key exchange remains)"
        ),
        evidence=evidence,
        rule=f"0 of {len(offered)} new connections that offered the saved session were resumed",
        confidence=Confidence.HIGH,
    )


def check_http2(ev: ConnectionEvidence, reference: Reference | None) -> Outcome:
    """Finding when ALPN offered ``h2`` and the server chose HTTP/1.1; the cost is what HTTP/1.1 makes a
    browser-like client (a few connections per host) wait for a connection under concurrency."""
    if not ev.tls:
        return NotTested(
            HTTP2_ID, "the target is plain HTTP: HTTP/2 is negotiated by ALPN over TLS (cleartext h2 was not tried)"
        )
    if "h2" not in ev.offered_alpn:
        return NotTested(HTTP2_ID, "the client did not offer h2")
    samples = (*ev.sequential, *ev.fresh)
    first = next((s for s in samples if s.ok and s.http_version is not None), None)
    if first is None:
        reason = failures.summarise(samples, len(samples)) or "no request completed"
        return NotTested(HTTP2_ID, f"no connection was established: {reason}")
    negotiated = first.alpn or ("h2" if first.http_version == "HTTP/2" else None)
    evidence: dict[str, Any] = {
        "alpn_offered": list(ev.offered_alpn),
        "alpn_selected": first.alpn,
        "http_version": first.http_version,
    }
    if negotiated == "h2":
        return Clear(HTTP2_ID, "the server selected h2 by ALPN: concurrent requests share one connection", evidence)
    conc = ev.concurrency
    cost = 0.0
    measured = False
    if conc is not None and conc.rounds:
        # per burst, the median wait of the requests beyond the pool's connections; the quietest burst counts (a
        # stall of the host during one burst delays all of its requests alike)
        burst_waits: list[float] = []
        waits: list[float] = []
        for burst in conc.rounds:
            queued_n = max(0, len(burst) - conc.connections_per_origin)
            done = sorted((s.pool_ms for s in burst if s.ok and s.pool_ms is not None), reverse=True)[:queued_n]
            queued = [w for w in done if w >= QUEUED_MIN_POOL_MS]
            waits.extend(done)
            wait = median(queued)
            if wait is not None:
                burst_waits.append(wait)
        evidence.update(
            {
                "bursts": len(conc.rounds),
                "requests_at_once": len(conc.rounds[0]),
                "connections_per_origin": conc.connections_per_origin,
                "connections_used": len({s.connection_id for s in conc.rounds[0] if s.ok}),
                "pool_wait_ms": [round(w, 3) for w in waits],
                "queued_wait_ms_per_burst": [round(w, 3) for w in burst_waits],
            }
        )
        failed = failures.summarise(conc.samples, len(conc.samples))
        if failed:
            evidence["concurrency_failures"] = failed
        if burst_waits:
            cost = min(burst_waits)
            measured = True
    if measured and conc is not None:
        basis = (
            f"ms a queued request waits for a free connection when {len(conc.rounds[0])} requests go at once through "
            f"{conc.connections_per_origin} HTTP/1.1 connections (a browser's per-host limit); median of the queued, "
            "quietest of the bursts"
        )
    else:
        basis = "not measured (the concurrency experiment did not run or nothing queued): structural cost only"
    return costed_finding(
        HTTP2_ID,
        cost,
        reference,
        structural=True,
        cost_basis=basis,
        evidence=evidence,
        rule=f"ALPN offered {', '.join(ev.offered_alpn)} and the server selected {first.alpn or 'nothing (no ALPN)'}",
        confidence=Confidence.HIGH,
    )
