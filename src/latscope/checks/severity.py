"""How much a finding matters: its measured cost next to the typical request of the same run.

Rules (documented for users in the report and the JSON's ``cost_basis``):

- By share of the typical TTFT (every bottleneck in the headline catalogue delays the first token): **high** at
  :data:`HIGH_SHARE` or more, **medium** at :data:`MEDIUM_SHARE` or more, else **low**.
- Structural defects whose cost grows with the network round trip (no connection reuse, no TLS resumption, no
  HTTP/2) are at least **medium** even when loopback makes them cheap: each costs one or more RTTs per new
  connection, and a real client is rarely 0.05 ms from its server.
- Without a typical request to compare with (the baseline failed), absolute fallbacks apply:
  :data:`FALLBACK_HIGH_MS` and :data:`FALLBACK_MEDIUM_MS`.
"""

from __future__ import annotations

from typing import Any

from latscope.checks.samples import Reference
from latscope.findings import Confidence, Finding, Severity, make_finding

#: A quarter of the typical TTFT: a user waiting for the first token notices that much added time.
HIGH_SHARE = 0.25
#: One twentieth of the typical TTFT: measurable and worth fixing, below it the finding is a detail.
MEDIUM_SHARE = 0.05
#: Absolute fallbacks (ms) when no typical request was measured: about a screen refresh of patience (250 ms is
#: where chat UIs start to feel slow) and a tenth of it.
FALLBACK_HIGH_MS = 250.0
FALLBACK_MEDIUM_MS = 25.0


def share_of_ttft(cost_ms: float, reference: Reference | None) -> float | None:
    """``cost_ms`` as a fraction of the typical TTFT, or None without a reference (or a zero TTFT)."""
    if reference is None or reference.ttft_ms <= 0.0:
        return None
    return cost_ms / reference.ttft_ms


def severity_for(cost_ms: float, reference: Reference | None) -> Severity:
    """Severity from the cost's share of the typical TTFT (absolute fallbacks without a reference)."""
    share = share_of_ttft(cost_ms, reference)
    if share is None:
        if cost_ms >= FALLBACK_HIGH_MS:
            return Severity.HIGH
        return Severity.MEDIUM if cost_ms >= FALLBACK_MEDIUM_MS else Severity.LOW
    if share >= HIGH_SHARE:
        return Severity.HIGH
    return Severity.MEDIUM if share >= MEDIUM_SHARE else Severity.LOW


def structural_severity(cost_ms: float, reference: Reference | None) -> Severity:
    """Severity of a defect that costs round trips: as :func:`severity_for`, but never below medium."""
    severity = severity_for(cost_ms, reference)
    return severity if severity.rank >= Severity.MEDIUM.rank else Severity.MEDIUM


def cost_context(cost_ms: float, reference: Reference | None) -> dict[str, float]:
    """Evidence entries that put a cost next to the typical request: its share of TTFT and of end-to-end time (%)."""
    if reference is None:
        return {}
    out: dict[str, float] = {
        "typical_ttft_ms": round(reference.ttft_ms, 3),
        "typical_e2e_ms": round(reference.e2e_ms, 3),
    }
    if reference.ttft_ms > 0:
        out["share_of_typical_ttft_pct"] = round(100.0 * cost_ms / reference.ttft_ms, 1)
    if reference.e2e_ms > 0:
        out["share_of_typical_e2e_pct"] = round(100.0 * cost_ms / reference.e2e_ms, 1)
    return out


def costed_finding(
    finding_id: str,
    cost_ms: float,
    reference: Reference | None,
    *,
    cost_basis: str,
    evidence: dict[str, Any],
    rule: str,
    confidence: Confidence,
    structural: bool = False,
    fix: str | None = None,
) -> Finding:
    """The finding ``finding_id`` (:func:`~latscope.findings.make_finding`) with its severity from ``cost_ms`` next
    to the typical request (:func:`severity_for`; :func:`structural_severity` when ``structural``) and the cost's
    share of it added to its evidence (:func:`cost_context`)."""
    return make_finding(
        finding_id,
        severity=(structural_severity if structural else severity_for)(cost_ms, reference),
        cost_ms=cost_ms,
        cost_basis=cost_basis,
        evidence={**evidence, **cost_context(cost_ms, reference)},
        rule=rule,
        confidence=confidence,
        fix=fix,
    )
