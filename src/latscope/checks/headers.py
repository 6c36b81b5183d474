"""``request-header-bloat``: the client's request headers are large, and the server's time grows with their size.

Mechanism: large credentials (a signed JWT with many claims), accumulated cookies and tracing baggage make every
request's head tens of KB; a gateway that scans, parses or forwards headers pays per byte, a fresh connection may need
an extra round trip to send a head past the initial congestion window, and past a limit the request is refused (431,
or 400/494 from nginx). The experiment adds harmless padding headers of growing size to a short request on one
reused connection; the check fits the server's wait (request sent → first response byte: the server's time and the
network's, none of the client's own work) against the padding (ms per KB) and prices the client's own headers with
it.

A finding needs both halves of the catalogue's rule: the client's own headers above :data:`BLOATED_BYTES`, and a
time that grows with header size (the largest padding adds at least :data:`MIN_GROWTH_SHARE` of the control's
time along a steady line — :data:`MIN_FIT_R2` over three sizes or more, so one slow request is not a trend — and
the client's headers cost at least :data:`MIN_COST_MS`). The fix is smaller credentials (reference tokens)
and fewer cookies — never truncating a signed token, which breaks authentication.
"""

from __future__ import annotations

from typing import Any

from latscope.checks.evidence import HeaderEvidence, Reference
from latscope.checks.severity import costed_finding
from latscope.checks.stats import fit_line
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

KB = 1024.0


def check_header_bloat(ev: HeaderEvidence, reference: Reference | None) -> Outcome:
    """Finding when the client's headers exceed :data:`BLOATED_BYTES` and the server's time grows with header size
    enough that they cost at least :data:`MIN_COST_MS` (see the module docstring)."""
    usable = [(p.pad_bytes / KB, p.sample.wait_ms) for p in ev.points if p.sample.ok]
    points = [(kb, ms) for kb, ms in usable if ms is not None]
    if not ev.points or ev.points[0].pad_bytes != 0 or not ev.points[0].sample.ok or not points or points[0][0] != 0:
        return NotTested(HEADER_ID, "the request without padding did not complete")
    refused = f" (refused at {ev.refused_at_bytes // 1024} KB of padding: {ev.refused})" if ev.refused_at_bytes else ""
    fit = fit_line([kb for kb, _ in points], [ms for _, ms in points])
    if fit is None:
        return NotTested(HEADER_ID, f"no padded request completed{refused}")
    control_ms = points[0][1]
    largest_kb, largest_ms = points[-1]
    slope = max(0.0, fit.slope)
    own_kb = ev.own_header_bytes / KB
    cost = slope * own_kb
    evidence: dict[str, Any] = {
        "own_header_bytes": ev.own_header_bytes,
        "ms_per_kb": round(fit.slope, 4),
        "r2": round(fit.r2, 3),
        "wait_ms_by_pad_kb": {f"{kb:g}": round(ms, 3) for kb, ms in points},
        "refused_at_pad_bytes": ev.refused_at_bytes,
    }
    growth = largest_ms - control_ms
    steady = fit.n < 3 or fit.r2 >= MIN_FIT_R2
    if growth < MIN_GROWTH_SHARE * control_ms or fit.slope <= 0.0 or not steady:
        return Clear(
            HEADER_ID,
            f"the server's time does not grow with header size ({control_ms:.1f} ms without padding, "
            f"{largest_ms:.1f} ms with {largest_kb:g} KB, r² {fit.r2:.2f}){refused}",
            evidence,
        )
    if ev.own_header_bytes <= BLOATED_BYTES:
        return Clear(
            HEADER_ID,
            f"the server pays {fit.slope:.3f} ms per KB of headers, but this client's own headers are "
            f"{ev.own_header_bytes} bytes (bloated above {BLOATED_BYTES // 1024} KB){refused}",
            evidence,
        )
    if cost < MIN_COST_MS:
        return Clear(
            HEADER_ID,
            f"this client's {own_kb:.1f} KB of headers cost {cost:.2f} ms per request at {fit.slope:.3f} ms per KB, "
            f"below {MIN_COST_MS} ms{refused}",
            evidence,
        )
    good = fit.n >= 3 and fit.r2 >= GOOD_FIT_R2
    return costed_finding(
        HEADER_ID,
        cost,
        reference,
        cost_basis=f"ms per request for this client's {own_kb:.1f} KB of headers (time per KB × their size)",
        evidence=evidence,
        rule=(
            f"the client's headers are {own_kb:.1f} KB (above {BLOATED_BYTES // 1024} KB) and the server answers "
            f"{fit.slope:.3f} ms later per KB of headers ({control_ms:.1f} ms without padding, {largest_ms:.1f} ms "
            f"with {largest_kb:g} KB){refused}"
        ),
        confidence=Confidence.HIGH if good else Confidence.MEDIUM,
    )
