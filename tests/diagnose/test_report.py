"""The terminal report renders a diagnosis's JSON: summary waterfall, ranked findings, not tested, ruled out."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from latscope.report.diagnosis import diagnosis_report
from latscope.report.format import fmt_ms

DATA: dict[str, Any] = {
    "schema": "latscope.diagnosis/1",
    "target": {"url": "http://127.0.0.1:8088/v1", "model": "lab-model", "http_version": "HTTP/1.1", "rtt_ms": 0.01},
    "timeline_summary": {
        "requests": 3,
        "prompt_tokens": 64,
        "max_tokens": 32,
        "phases_ms": {
            "dns": 0.0,
            "connect": 0.0,
            "tls": 0.0,
            "send": 0.1,
            "wait": 6.0,
            "first_token": 0.2,
            "stream": 370.0,
        },
        "cold_request_phases_ms": {"dns": None, "connect": 0.4, "tls": None},
        "ttft_ms": 6.3,
        "e2e_ms": 376.3,
        "itl_ms_p50": 12.0,
        "itl_ms_p95": 12.6,
        "tpot_ms": 12.1,
    },
    "findings": [
        {
            "id": "queue-head-of-line",
            "title": "Long prompts block short ones",
            "severity": "high",
            "cost_ms": 1040.0,
            "cost_basis": "ms added to a short request's TTFT",
            "evidence": {"inflation_ms": 1040.0, "rounds": [1, 2]},
            "rule": "grew by 3 long prefills",
            "confidence": "high",
            "fix": "Schedule shortest-prompt-first.",
        },
    ],
    "not_tested": [{"id": "tls-no-resumption", "reason": "the target is plain HTTP"}],
    "inconclusive": [{"id": "slow-request-parsing", "reason": "straddles the threshold", "evidence": {}}],
    "clear": [{"id": "stream-proxy-buffering", "reason": "TTFT does not grow with max_tokens", "evidence": {}}],
    "experiments": [],
    "duration_s": 12.3,
    "quick": False,
}


def _render(data: dict[str, Any]) -> str:
    console = Console(record=True, width=110, color_system=None)
    console.print(diagnosis_report(data))
    return console.export_text()


def test_the_report_shows_every_section_in_reading_order() -> None:
    text = _render(DATA)
    order = [
        "latscope diagnose http://127.0.0.1:8088/v1",
        "Where a typical request's time goes",
        "wait (server)",
        "HIGH",
        "queue-head-of-line",
        "1.04 s",
        "fix: Schedule shortest-prompt-first.",
        "Not tested",
        "Inconclusive",
        "Ruled out",
        "stream-proxy-buffering",
    ]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions)


def test_a_diagnosis_without_findings_or_typical_request_still_renders() -> None:
    text = _render({"target": {"url": "u", "model": "m"}, "timeline_summary": {"requests": 0}, "findings": []})
    assert "No bottleneck found" in text and "no timeline summary" in text.lower()


def test_durations_read_in_the_right_unit() -> None:
    assert fmt_ms(None) == "—" and fmt_ms(0.123) == "0.12 ms" and fmt_ms(12.34) == "12.3 ms"
    assert fmt_ms(1500.0) == "1.50 s"


def test_the_target_line_shows_the_path_it_was_measured_over() -> None:
    far = DATA | {"target": DATA["target"] | {"rtt_ms": 40.378, "upload_mbit_s": 19.4}}
    line = _render(far).splitlines()[0]
    assert "rtt 40.4 ms" in line and "upload 19.4 Mbit/s" in line
    near = _render(DATA).splitlines()[0]
    assert "rtt 0.01 ms" in near and "upload" not in near  # not measured: not shown


def test_the_target_line_says_when_the_target_announces_http3() -> None:
    h3 = DATA | {"target": DATA["target"] | {"h3_advertised": {"port": 443, "host": None, "max_age_s": 86400}}}
    assert "h3 advertised (port 443, max-age 86400 s)" in " ".join(_render(h3).split())
    none = DATA | {"target": DATA["target"] | {"h3_advertised": None}}
    assert "h3 advertised" not in _render(none)
