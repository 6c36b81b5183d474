"""Which experiments ids need, and the ``latscope.diagnosis/1`` JSON contract of a result."""

from __future__ import annotations

import orjson
import pytest

from latscope.checks.baseline import BaselineEvidence, SweepPoint
from latscope.checks.samples import RequestSample
from latscope.diagnose import SCHEMA, Diagnosis, ExperimentRun, UnknownFindingError, diagnosed_ids
from latscope.diagnose.plan import families_for, select
from latscope.diagnose.summary import baseline_summary, reference, timeline_summary
from latscope.findings import Clear, Confidence, Inconclusive, NotTested, Severity, make_finding


def test_select_accepts_a_comma_list_and_keeps_catalogue_order() -> None:
    assert select(None) == diagnosed_ids()
    assert select("stream-proxy-buffering, no-connection-reuse") == ("no-connection-reuse", "stream-proxy-buffering")
    assert select("slow-dns") == ("slow-dns",)
    with pytest.raises(UnknownFindingError, match="no-such-finding"):
        select("slow-dns,no-such-finding")
    with pytest.raises(UnknownFindingError):
        select(" , ")


def test_families_follow_the_request_path() -> None:
    assert families_for(["stream-coalescing-nagle", "tls-no-resumption"]) == ("connection", "streaming")
    assert families_for(diagnosed_ids()) == (
        "connection",
        "caching",
        "tracecontext",
        "headers",
        "parsing",
        "multimodal",
        "queueing",
        "batching",
        "prefill",
        "prefixcache",
        "saturation",
        "kvcache",
        "sampling",
        "streaming",
        "gateway",  # after the others: its pause lets a bucket they drained refill
        "overhead",
        "ratelimit",  # last, off path order: it reads the refusals every other experiment met
    )


def _typical(ttft: float, e2e: float, *, dns: float | None = None, connect: float | None = None) -> RequestSample:
    return RequestSample(
        label="typical",
        dns_ms=dns,
        connect_ms=connect,
        send_ms=0.1,
        wait_ms=ttft - 0.2,
        ttfb_ms=ttft - 0.1,
        ttft_ms=ttft,
        e2e_ms=e2e,
        itl_ms=(12.0, 12.5, 11.5),
        output_tokens=4,
        reused=dns is None,
    )


def test_the_typical_request_gives_the_reference_and_the_timeline_summary() -> None:
    baseline = BaselineEvidence(
        sweep=(SweepPoint(16, 5.0), SweepPoint(1016, 45.0)),
        typical=(_typical(10.0, 60.0, dns=0.5, connect=0.3), _typical(6.0, 50.0), _typical(6.5, 52.0)),
        typical_prompt_tokens=64,
        typical_max_tokens=4,
    )
    ref = reference(baseline)
    assert ref is not None and ref.ttft_ms == 6.5 and ref.e2e_ms == 52.0 and ref.itl_ms == 12.0
    summary = timeline_summary(baseline)
    assert summary["phases_ms"]["dns"] == 0.0  # reused connections pay none: the median request is warm
    assert summary["cold_request_phases_ms"]["connect"] == 0.3
    assert summary["ttft_ms"] == 6.5 and summary["itl_ms_p50"] == 12.0
    assert baseline_summary(baseline)["prefill_ms_per_1k_tokens"] == 40.0
    assert reference(None) is None and timeline_summary(None) == {"requests": 0}


def test_the_json_contract() -> None:
    finding = make_finding(
        "queue-head-of-line",
        severity=Severity.HIGH,
        cost_ms=300.0,
        cost_basis="ms added to a short request's TTFT",
        evidence={"inflation_ms": 300.0},
        rule="grew by 3 long prefills",
        confidence=Confidence.HIGH,
    )
    low = make_finding(
        "no-connection-reuse",
        severity=Severity.MEDIUM,
        cost_ms=900.0,
        cost_basis="b",
        evidence={},
        rule="r",
        confidence=Confidence.HIGH,
    )
    result = Diagnosis(
        target={"url": "http://127.0.0.1:1/v1", "model": "m"},
        outcomes=[
            low,
            finding,
            NotTested("tls-no-resumption", "plain HTTP"),
            Inconclusive("slow-request-parsing", "noisy", {"r2": 0.3}),
            Clear("stream-coalescing-nagle", "nothing held"),
        ],
        experiments=[ExperimentRun("baseline", "ok", 5, 1.23456)],
        duration_s=4.5,
        checked=diagnosed_ids(),
    )
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert data["schema"] == SCHEMA == "latscope.diagnosis/1"
    assert [f["id"] for f in data["findings"]] == ["queue-head-of-line", "no-connection-reuse"]  # severity first
    assert set(data["findings"][0]) >= {
        "id",
        "title",
        "severity",
        "cost_ms",
        "cost_basis",
        "evidence",
        "confidence",
        "fix",
    }
    assert data["not_tested"] == [{"id": "tls-no-resumption", "reason": "plain HTTP"}]
    assert data["inconclusive"][0]["id"] == "slow-request-parsing" and data["clear"][0]["reason"] == "nothing held"
    assert data["experiments"][0] == {
        "name": "baseline",
        "status": "ok",
        "requests": 5,
        "duration_s": 1.235,
        "message": "",
    }
    assert result.finding("queue-head-of-line") is finding and result.finding("tls-no-resumption") is None
