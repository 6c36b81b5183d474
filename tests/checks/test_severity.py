"""Severity rules: share of the typical TTFT, a medium floor for structural defects, absolute fallbacks."""

from __future__ import annotations

from latscope.checks.samples import Reference
from latscope.checks.severity import cost_context, severity_for, structural_severity
from latscope.findings import Severity

REF = Reference(ttft_ms=100.0, e2e_ms=1000.0)


def test_severity_by_share_of_the_typical_ttft() -> None:
    assert severity_for(25.0, REF) is Severity.HIGH
    assert severity_for(24.9, REF) is Severity.MEDIUM
    assert severity_for(5.0, REF) is Severity.MEDIUM
    assert severity_for(4.9, REF) is Severity.LOW


def test_structural_defects_are_at_least_medium() -> None:
    assert structural_severity(0.1, REF) is Severity.MEDIUM
    assert structural_severity(40.0, REF) is Severity.HIGH


def test_absolute_fallbacks_without_a_typical_request() -> None:
    assert severity_for(300.0, None) is Severity.HIGH
    assert severity_for(30.0, None) is Severity.MEDIUM
    assert severity_for(3.0, None) is Severity.LOW


def test_cost_context_gives_shares_in_percent() -> None:
    assert cost_context(50.0, REF) == {
        "typical_ttft_ms": 100.0,
        "typical_e2e_ms": 1000.0,
        "share_of_typical_ttft_pct": 50.0,
        "share_of_typical_e2e_pct": 5.0,
    }
    assert cost_context(50.0, None) == {}
