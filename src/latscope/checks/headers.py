"""``request-header-bloat``: the client's request headers are large, and the server's time grows with their size.

Mechanism: large credentials (a signed JWT with many claims), accumulated cookies and tracing baggage make every
request's head tens of KB; a gateway that scans, parses or forwards headers pays per byte, a fresh connection may need
an extra round trip to send a head past the initial congestion window, and past a limit the request is refused (431,
or 400/494 from nginx). The experiment adds harmless padding headers of growing size to a short request, each size
on a new connection and then on a reused one; the check fits the server's wait (request sent → first response byte:
the server's time and the network's, none of the client's own work) against the padding (ms per KB) on each kind of
connection and prices the client's own headers with one of the two lines.

Which line prices them: the reused connections' — the client's requests mostly go on kept-alive connections, where
what grows with the head is the server's (and its proxies') work per byte. When the server kept no connection open
(most of the reused sweep's requests went on new connections after all), every request of the client's pays a new
connection's head, so the new connections' line prices them. A new connection's line can be the steeper of the two:
a head past TCP's initial congestion window (RFC 6928: ten segments, about 14 KB) waits for the first
acknowledgements, a round trip more at a distance; the evidence gives both lines (``reused_connections``,
``new_connections``) and which one priced the cost (``priced_on``). At a distance the reused line carries some of the
head's transfer too (an idle connection may restart from the initial window, ``tcp_slow_start_after_idle``, and
the kernel paces what it sends): at a 40 ms round trip the tuned lab, which spends nothing per byte, showed 0.75–0.8
ms per KB there. That time is still what the client's head costs it, and the fix is the same; the line does not tell the
server's share from the network's.

A finding needs both halves of the catalogue's rule: the client's own headers above :data:`BLOATED_BYTES`, and a
time that grows with header size (the largest padding adds at least :data:`MIN_GROWTH_SHARE` of the control's
time along a steady line — :data:`MIN_FIT_R2` over three sizes or more, so one slow request is not a trend — and
the client's headers cost at least :data:`MIN_COST_MS`), both on the line that prices them. The fix is smaller
credentials (reference tokens) and fewer cookies — never truncating a signed token, which breaks authentication.

A lean client (latscope's own headers are a few hundred bytes) is not every client: a browser's cookies plus a JWT
weigh 2–8 KB. For such a client the check prices the server's time per KB at those sizes instead, on a line through
the sweep's sizes up to :data:`BROWSER_MAX_BYTES` only (all inside TCP's initial window, so a round trip a larger
head waits for at a distance is not in it), at :data:`BROWSER_BYTES`; the line must be steady, its growth at least
:data:`MIN_GROWTH_SHARE` of the control's server time (its wait less one round trip), the other kind of connection
must show at least half the slope (below the initial window both pay the same per byte, so one sweep's drift is not
taken for a cost), and the cost at least :data:`MIN_COST_MS`. The finding is then about the server's clients, not this
one: medium confidence, priced for a browser-sized head. Each size up to there is one request per kind in the sweep,
which a busy host moves by a millisecond, as much as 8 KB of a 0.5 ms-per-KB scan adds (one CI run: r² 0.58 and
0.23 ms per KB up to 8 KB, 0.66 over the whole sweep; and single requests priced a 4 KB head within ±25 % in about
seven runs of eight): where the whole sweep's line prices a browser-sized head (:func:`browser_sizes_wanted`), the
experiment sends those sizes again, and each size's fastest request on each kind makes the line (a busy host only
adds time). Only over HTTP/1.1: HTTP/2 and HTTP/3 index headers that repeat on a connection (HPACK, RFC 7541; QPACK,
RFC 9204), so a browser's cookies and token are sent and decoded once per connection, not per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from latscope.checks.samples import Reference, RequestSample
from latscope.checks.severity import costed_finding
from latscope.checks.stats import LineFit, fit_line
from latscope.findings import Clear, Confidence, NotTested, Outcome

HEADER_ID = "request-header-bloat"

#: Request headers above this are bloated (the catalogue's 8 KB: nginx's default single header buffer, and the
#: size past which many gateways start refusing).
BLOATED_BYTES = 8 * 1024
#: The largest padding must add at least this share of the control's time: single requests on a busy host vary by
#: a few percent, and a fifth is far beyond that.
MIN_GROWTH_SHARE = 0.2
#: The client's own headers must cost at least this much per request, ms, to be worth a finding.
MIN_COST_MS = 1.0
#: Over three sizes or more the times must lie on a line this well: one slow request among three fits at most 0.75.
MIN_FIT_R2 = 0.8
#: A fit this good over three or more sizes is a steady per-byte cost (high confidence).
GOOD_FIT_R2 = 0.9

#: A browser's request headers (cookies plus a JWT): 2–8 KB. A lean client's finding is priced at this size …
BROWSER_BYTES = 4 * 1024
#: … on the sweep's sizes up to this one (inside TCP's initial window, RFC 6928: about 14 KB) …
BROWSER_MAX_BYTES = 8 * 1024
#: … and the evidence gives the cost at these sizes too, bytes.
BROWSER_SIZES = (2 * 1024, 4 * 1024, 8 * 1024)
#: The other kind of connection must show at least this share of the priced line's slope at browser sizes.
AGREE_SHARE = 0.5

KB = 1024.0


@dataclass(frozen=True, slots=True)
class HeaderPoint:
    """One request of the header-size sweep: ``pad_bytes`` of harmless padding headers added to the client's own."""

    pad_bytes: int
    sample: RequestSample


@dataclass(frozen=True, slots=True)
class HeaderEvidence:
    """The header-size sweep: the same short request with growing padding headers (``X-Latscope-Pad-N``), each size
    on a new connection and then on a reused one, the client's own headers (credentials included) unchanged.

    Fields:
        own_header_bytes: size of the client's own request headers, bytes (``name: value`` plus CRLF each; the
            values are never kept).
        points: the requests on reused connections, in the order sent, the first without padding (the control).
        refused_at_bytes: the padding at which the server refused the request (431, 400, 494, or closed the
            connection) on either kind of connection, None when it accepted every size; the sweep stops there.
        refused: what the server answered then.
        small_repeats: the sizes up to :data:`BROWSER_MAX_BYTES` sent again on reused connections (the control
            first each time), when the whole sweep priced a browser-sized head (:func:`browser_sizes_wanted`).
        fresh_small_repeats: the same, on new connections.
        fresh: the same sizes, each on a new connection (``new_connection``), in the order sent, the first without
            padding: a head past TCP's initial congestion window (RFC 6928: ten segments, about 14 KB) waits for the
            first acknowledgements there, a round trip more at a distance, so this sweep's time per KB can exceed
            the reused one's. Empty when not run.
    """

    own_header_bytes: int
    points: tuple[HeaderPoint, ...] = ()
    refused_at_bytes: int | None = None
    refused: str | None = None
    fresh: tuple[HeaderPoint, ...] = ()
    small_repeats: tuple[HeaderPoint, ...] = ()
    fresh_small_repeats: tuple[HeaderPoint, ...] = ()


def _waits(points: Sequence[HeaderPoint]) -> list[tuple[float, float]] | None:
    """``(padding KB, wait ms)`` of the completed requests of one sweep; None when its control (no padding, first)
    did not complete."""
    if not points or points[0].pad_bytes != 0 or not points[0].sample.ok or points[0].sample.wait_ms is None:
        return None
    return [(p.pad_bytes / KB, p.sample.wait_ms) for p in points if p.sample.ok and p.sample.wait_ms is not None]


def _fit(waits: list[tuple[float, float]] | None) -> LineFit | None:
    return None if waits is None else fit_line([kb for kb, _ in waits], [ms for _, ms in waits])


def _line(waits: list[tuple[float, float]] | None, fit: LineFit | None) -> dict[str, Any] | None:
    """One sweep's line for the evidence (None when it has none)."""
    if waits is None or fit is None:
        return None
    return {
        "ms_per_kb": round(fit.slope, 4),
        "r2": round(fit.r2, 3),
        "wait_ms_by_pad_kb": {f"{kb:g}": round(ms, 3) for kb, ms in waits},
    }


def _browser_said(evidence: dict[str, Any]) -> str:
    """What the browser-size line said, for a clear."""
    line = evidence.get("browser_sizes")
    if not line:
        return f"was not measured (fewer than three sizes up to {BROWSER_MAX_BYTES // 1024} KB completed)"
    if "cost_ms_by_kb" not in line:
        return f"was {line['not_a_cost']}"
    cost = line["cost_ms_by_kb"][f"{BROWSER_BYTES // 1024}"]
    return f"would cost a {BROWSER_BYTES // 1024} KB head {cost:.2f} ms ({line['not_a_cost']})"


def _small(points: Sequence[HeaderPoint], repeats: Sequence[HeaderPoint] = ()) -> Sequence[HeaderPoint]:
    """The sweep's sizes up to :data:`BROWSER_MAX_BYTES`, each size's fastest completed request of the sweep and its
    repeats (one per size, smallest first; a size none of whose requests completed keeps its first)."""
    by_size: dict[int, HeaderPoint] = {}
    for p in [*points, *repeats]:
        kept = by_size.get(p.pad_bytes)
        if p.pad_bytes <= BROWSER_MAX_BYTES and (kept is None or _wait(p) < _wait(kept)):
            by_size[p.pad_bytes] = p
    return [by_size[size] for size in sorted(by_size)]


def _wait(point: HeaderPoint) -> float:
    """A point's wait (ms) for choosing the fastest: infinite where it did not complete."""
    if not point.sample.ok or point.sample.wait_ms is None:
        return float("inf")
    return point.sample.wait_ms


def browser_sizes_wanted(ev: HeaderEvidence) -> bool:
    """The client is lean, the sweep went over HTTP/1.x, and its whole line on the priced kind of connection is
    steady and prices a browser-sized head at :data:`MIN_COST_MS` or more: the sizes up to :data:`BROWSER_MAX_BYTES`
    are then worth sending again, so the line that prices them is drawn through each size's fastest request (module
    docstring)."""
    if ev.own_header_bytes > BLOATED_BYTES:
        return False
    priced = ev.fresh if priced_on_fresh(ev) else ev.points
    if _multiplexed(priced):
        return False
    fit = _fit(_waits(priced))
    return fit is not None and fit.n >= 3 and fit.r2 >= MIN_FIT_R2 and fit.slope * BROWSER_BYTES / KB >= MIN_COST_MS


def _multiplexed(points: Sequence[HeaderPoint]) -> list[str]:
    """The HTTP versions past 1.x the points went over (``2``, ``3``), sorted."""
    versions = {(p.sample.http_version or "").removeprefix("HTTP/") for p in points}
    return sorted(v for v in versions if v and not v.startswith("1"))


def _browser_sized(
    ev: HeaderEvidence, reference: Reference | None, on_fresh: bool, kind: str, evidence: dict[str, Any]
) -> Outcome | None:
    """The finding for a lean client when the server's time per KB at browser sizes costs a browser-sized head at
    least :data:`MIN_COST_MS` (module docstring), else None (and the small line in ``evidence``)."""
    priced, other = (ev.fresh, ev.points) if on_fresh else (ev.points, ev.fresh)
    priced_again, other_again = (
        (ev.fresh_small_repeats, ev.small_repeats) if on_fresh else (ev.small_repeats, ev.fresh_small_repeats)
    )
    multiplexed = _multiplexed(priced)
    if multiplexed:
        # a browser's cookies and token repeat on every request: HPACK (RFC 7541) and QPACK (RFC 9204) keep such
        # headers in the connection's dynamic table and send an index after the first, so their size is not what
        # each request pays (the padding, one new header per size, is decoded anew every time)
        evidence["browser_sizes"] = {
            "not_a_cost": f"not priced over HTTP/{multiplexed[0]}: repeated headers are indexed after the first request"
        }
        return None
    waits = _waits(_small(priced, priced_again))
    fit = _fit(waits)
    if waits is None or fit is None or fit.n < 3:
        return None
    other_fit = _fit(_waits(_small(other, other_again)))
    evidence["browser_sizes"] = {
        **(_line(waits, fit) or {}),
        **({"sent_again": len(priced_again)} if priced_again else {}),
        "cost_ms_by_kb": {f"{b // 1024}": round(max(0.0, fit.slope) * b / KB, 3) for b in BROWSER_SIZES},
    }
    rtt = priced[0].sample.rtt_ms or 0.0
    control_server_ms = max(1.0, waits[0][1] - rtt)
    top_kb, top_ms = waits[-1]
    cost = fit.slope * BROWSER_BYTES / KB
    why_not = [
        why
        for failed, why in (
            (fit.r2 < MIN_FIT_R2, f"not a steady line: r² {fit.r2:.2f}"),
            (
                top_ms - waits[0][1] < MIN_GROWTH_SHARE * control_server_ms,
                f"{top_kb:g} KB added under {MIN_GROWTH_SHARE:.0%} of the {control_server_ms:.1f} ms server time",
            ),
            (cost < MIN_COST_MS, f"under {MIN_COST_MS} ms"),
            (
                other_fit is not None and other_fit.slope < AGREE_SHARE * fit.slope,
                "the other kind of connection did not show it",
            ),
        )
        if failed
    ]
    if why_not:
        evidence["browser_sizes"]["not_a_cost"] = "; ".join(why_not)
        return None
    beside = f", {other_fit.slope:.3f} on the other kind" if other_fit is not None else ""
    return costed_finding(
        HEADER_ID,
        cost,
        reference,
        cost_basis=(
            f"ms per request for a browser's {BROWSER_BYTES // 1024} KB of cookies and token (time per KB up to "
            f"{BROWSER_MAX_BYTES // 1024} KB on {kind} × that size); this client's own headers are "
            f"{ev.own_header_bytes} bytes"
        ),
        evidence=evidence,
        rule=(
            f"the server answers {fit.slope:.3f} ms later per KB of headers at browser sizes on {kind} "
            f"({waits[0][1]:.1f} ms without padding, {top_ms:.1f} ms with {top_kb:g} KB, r² {fit.r2:.2f}{beside}): "
            f"a client sending 2–8 KB of headers pays {max(0.0, fit.slope) * 2:.1f}–{max(0.0, fit.slope) * 8:.1f} ms "
            "per request"
        ),
        confidence=Confidence.MEDIUM,
    )


def priced_on_fresh(ev: HeaderEvidence) -> bool:
    """The new connections' line prices the client's headers: the server kept no connection open across the reused
    sweep (module docstring)."""
    return bool(ev.fresh) and not kept_alive(ev.points)


def kept_alive(points: Sequence[HeaderPoint]) -> bool:
    """The server kept the connection open across the reused sweep: at most half of its completed requests went on
    a new connection after all (to replace a connection the server had closed; unknown counts as reused)."""
    done = [p for p in points if p.sample.ok]
    return sum(p.sample.reused is False for p in done) * 2 <= len(done)


def check_header_bloat(ev: HeaderEvidence, reference: Reference | None) -> Outcome:
    """Finding when the client's headers exceed :data:`BLOATED_BYTES` and the server's time grows with header size
    enough that they cost at least :data:`MIN_COST_MS`, on the line of the connections the client's requests go on
    (see the module docstring)."""
    reused_waits, fresh_waits = _waits(ev.points), _waits(ev.fresh)
    reused_fit, fresh_fit = _fit(reused_waits), _fit(fresh_waits)
    on_fresh = priced_on_fresh(ev)
    waits, fit = (fresh_waits, fresh_fit) if on_fresh else (reused_waits, reused_fit)
    kind, other_kind = (
        ("new connections", "reused connections") if on_fresh else ("reused connections", "new connections")
    )
    other = reused_fit if on_fresh else fresh_fit
    if waits is None:
        return NotTested(HEADER_ID, f"the request without padding on {kind} did not complete")
    refused = f" (refused at {ev.refused_at_bytes // 1024} KB of padding: {ev.refused})" if ev.refused_at_bytes else ""
    if fit is None:
        return NotTested(HEADER_ID, f"no padded request on {kind} completed{refused}")
    control_ms = waits[0][1]
    largest_kb, largest_ms = waits[-1]
    slope = max(0.0, fit.slope)
    own_kb = ev.own_header_bytes / KB
    cost = slope * own_kb
    evidence: dict[str, Any] = {
        "own_header_bytes": ev.own_header_bytes,
        "priced_on": kind,
        "ms_per_kb": round(fit.slope, 4),
        "r2": round(fit.r2, 3),
        "reused_connections": _line(reused_waits, reused_fit),
        "new_connections": _line(fresh_waits, fresh_fit),
        "refused_at_pad_bytes": ev.refused_at_bytes,
    }
    beside = f"; {other.slope:.3f} ms per KB on {other_kind}" if other is not None else ""
    if ev.own_header_bytes <= BLOATED_BYTES:
        browser = _browser_sized(ev, reference, on_fresh, kind, evidence)
        if browser is not None:
            return browser
    growth = largest_ms - control_ms
    steady = fit.n < 3 or fit.r2 >= MIN_FIT_R2
    if growth < MIN_GROWTH_SHARE * control_ms or fit.slope <= 0.0 or not steady:
        return Clear(
            HEADER_ID,
            f"the server's time does not grow with header size on {kind} ({control_ms:.1f} ms without padding, "
            f"{largest_ms:.1f} ms with {largest_kb:g} KB, r² {fit.r2:.2f}{beside}){refused}",
            evidence,
        )
    if ev.own_header_bytes <= BLOATED_BYTES:
        return Clear(
            HEADER_ID,
            f"the first byte comes {fit.slope:.3f} ms later per KB of headers on {kind}{beside}, but this client's "
            f"own headers are {ev.own_header_bytes} bytes (bloated above {BLOATED_BYTES // 1024} KB), and at browser "
            f"sizes it {_browser_said(evidence)}{refused}",
            evidence,
        )
    if cost < MIN_COST_MS:
        return Clear(
            HEADER_ID,
            f"this client's {own_kb:.1f} KB of headers cost {cost:.2f} ms per request at {fit.slope:.3f} ms per KB "
            f"on {kind}{beside}, below {MIN_COST_MS} ms{refused}",
            evidence,
        )
    good = fit.n >= 3 and fit.r2 >= GOOD_FIT_R2
    closed = "; the server kept no connection open, so every request pays a new connection's head" if on_fresh else ""
    return costed_finding(
        HEADER_ID,
        cost,
        reference,
        cost_basis=(
            f"ms per request for this client's {own_kb:.1f} KB of headers (time per KB on {kind} × their size{closed})"
        ),
        evidence=evidence,
        rule=(
            f"the client's headers are {own_kb:.1f} KB (above {BLOATED_BYTES // 1024} KB) and the server answers "
            f"{fit.slope:.3f} ms later per KB of headers on {kind} ({control_ms:.1f} ms without padding, "
            f"{largest_ms:.1f} ms with {largest_kb:g} KB{beside}){refused}"
        ),
        confidence=Confidence.HIGH if good else Confidence.MEDIUM,
    )
