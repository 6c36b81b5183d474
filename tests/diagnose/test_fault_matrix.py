"""The fault matrix: one lab fault on → its finding (medium or high) and nothing else above low, with a measured
cost within ±25 % of what the fault really costs; the tuned lab → nothing above low; the naive lab → the four hidden
bottlenecks.

Each case runs ``diagnose(quick=True)`` against an in-process lab with a cost model whose costs are short but
clearly measurable. The ground truth comes from tests/diagnose/truth.py (the lab's records and send stamps, or an
independent measurement with a separate client).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from latscope.diagnose import Diagnosis, diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.findings import Finding, NotTested, Severity
from latscope.lab.app import Lab
from latscope.wire.target import Target
from tests.diagnose import truth

TEST_COST = truth.TEST_COST
#: The ±25 % the brief asks of every measured cost …
REL_TOLERANCE = 0.25
#: … with a floor for costs that are a loopback connection's setup: a TCP connect takes a fraction of a millisecond
#: and a TLS handshake 1.5–9 ms from one connection to the next on this busy 2-core host (client and server share
#: one event loop), so ±25 % of a median of a handful is below the noise.
SETUP_FLOOR_MS = 2.0

Truth = Callable[[Lab, Diagnosis], Awaitable[float]]


async def _parse_truth(lab: Lab, result: Diagnosis) -> float:
    return truth.parse_ms_per_mb(list(lab.records))


async def _image_truth(lab: Lab, result: Diagnosis) -> float:
    return truth.image_ms_per_mb(list(lab.records))


async def _queue_truth(lab: Lab, result: Diagnosis) -> float:
    return truth.queue_inflation_ms(list(lab.records))


async def _nagle_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.nagle_hold_ms(lab)


async def _buffer_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.buffered_hold_ms(lab, int(result.timeline_summary["max_tokens"]))


async def _connection_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.new_connection_ms(lab)


async def _handshake_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.full_handshake_ms(lab)


async def _h2_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.first_wave_e2e_ms(lab, connections=6, max_tokens=8)


async def _window_truth(lab: Lab, result: Diagnosis) -> float:
    return await truth.lone_window_wait_ms(lab)


async def _attention_truth(lab: Lab, result: Diagnosis) -> float:
    finding = result.finding("prefill-superlinear")
    assert finding is not None
    return truth.quadratic_prefill_ms(lab, list(lab.records), finding.evidence["longest_prompt_tokens"])


async def _saturation_truth(lab: Lab, result: Diagnosis) -> float:
    finding = result.finding("capacity-saturation")
    assert finding is not None
    return truth.sweep_queue_ms(list(lab.records), finding.evidence["waited_at"])


async def _kv_truth(lab: Lab, result: Diagnosis) -> float:
    return truth.preempted_hold_ms(list(lab.records), truth.kv_burst(result))


async def _prefix_truth(lab: Lab, result: Diagnosis) -> float:
    finding = result.finding("prefix-cache-miss")
    assert finding is not None
    return truth.prefix_recompute_ms(lab, list(lab.records), finding.evidence["prefix_tokens"])


async def _sampling_truth(lab: Lab, result: Diagnosis) -> float:
    finding = result.finding("decode-host-overhead")
    assert finding is not None
    return truth.sampling_cost_ms(lab, finding.evidence["stream_tokens"])


async def _retry_after_truth(lab: Lab, result: Diagnosis) -> float:
    return truth.retry_after_ms(list(lab.records))


async def _gateway_wait_truth(lab: Lab, result: Diagnosis) -> float:
    finding = result.finding("gateway-queueing")
    assert finding is not None
    return truth.gateway_wait_ms(list(lab.records), finding.evidence["high_request_ids"])


#: fault, TLS, the finding it must produce, its ground truth, an absolute floor for the tolerance (ms)
CASES: list[tuple[str, bool, str, Truth, float]] = [
    ("no-keepalive", False, "no-connection-reuse", _connection_truth, SETUP_FLOOR_MS),
    ("short-keepalive", False, "no-connection-reuse", _connection_truth, SETUP_FLOOR_MS),
    ("slow-parse", False, "slow-request-parsing", _parse_truth, 0.0),
    ("slow-image-preprocessing", False, "multimodal-preprocessing", _image_truth, 0.0),
    ("queue-hol", False, "queue-head-of-line", _queue_truth, 0.0),
    ("nagle", False, "stream-coalescing-nagle", _nagle_truth, 0.0),
    ("proxy-buffering", False, "stream-proxy-buffering", _buffer_truth, 0.0),
    ("tls-no-tickets", True, "tls-no-resumption", _handshake_truth, SETUP_FLOOR_MS),
    ("no-h2", True, "http2-not-negotiated", _h2_truth, 0.0),
    ("batching-window", False, "batching-window", _window_truth, 0.0),
    ("naive-attention", False, "prefill-superlinear", _attention_truth, 0.0),
    ("few-slots", False, "capacity-saturation", _saturation_truth, 0.0),
    ("no-prefix-cache", False, "prefix-cache-miss", _prefix_truth, 0.0),
    ("small-kv-cache", False, "kv-cache-pressure", _kv_truth, 0.0),
    ("slow-sampling", False, "decode-host-overhead", _sampling_truth, 0.0),
    ("rate-limit", False, "rate-limited", _retry_after_truth, 0.0),
    ("gateway-queue", False, "gateway-queueing", _gateway_wait_truth, 0.0),
]


def _above_low(result: Diagnosis) -> dict[str, Finding]:
    return {f.id: f for f in result.findings if f.severity is not Severity.LOW}


async def _diagnose(lab: Lab) -> Diagnosis:
    ca = str(lab.cert_path) if lab.cert_path is not None else None
    return await diagnose(
        Target.resolve(lab.url, ca_file=ca, timeouts=REQUEST_TIMEOUTS), quick=True, keep_timelines=True
    )


@pytest.mark.parametrize(("fault", "tls", "finding_id", "truth_of", "floor_ms"), CASES, ids=[c[0] for c in CASES])
async def test_a_single_fault_is_named_alone_with_its_measured_cost(
    fault: str, tls: bool, finding_id: str, truth_of: Truth, floor_ms: float
) -> None:
    async with Lab(profile="tuned", faults=[fault], tls=tls, cost=TEST_COST, truth=True) as lab:
        result = await _diagnose(lab)
        expected = _above_low(result)
        assert list(expected) == [finding_id], result.to_dict()
        finding = expected[finding_id]
        real = await truth_of(lab, result)
    tolerance = max(REL_TOLERANCE * real, floor_ms)
    assert abs(finding.cost_ms - real) <= tolerance, (finding.cost_ms, real, finding.evidence)


#: Faults whose finding costs no time — an observability defect (low) and a correctness risk (medium) — with the lab's
#: own account of what happened as their truth instead of a cost: fault, the finding, its severity, the truth.
ZeroCostTruth = Callable[[Lab, Finding], None]


def _trace_truth(lab: Lab, finding: Finding) -> None:
    sent = finding.evidence["sent_trace_id"]
    assert all(r.traceparent is None for r in lab.records)  # the service behind the edge never saw one …
    assert [r["trace_id"] for r in finding.evidence["returned"]] != [sent]  # … and answered with its own trace


def _cache_truth(lab: Lab, finding: Finding) -> None:
    # the repeat (sent again if a stall left the check undecided), and nothing else of the diagnosis, was replayed
    assert lab.cache_hits >= 1 and lab.cache_responses_replayed == 1
    assert finding.evidence.get("hit_requests", ["repeat"]) == ["repeat"]  # (headers name it; timing implies it)


ZERO_COST_CASES: list[tuple[str, str, Severity, ZeroCostTruth]] = [
    ("drop-trace-context", "trace-context-dropped", Severity.LOW, _trace_truth),
    ("response-cache", "response-cached", Severity.MEDIUM, _cache_truth),
    ("silent-response-cache", "response-cached", Severity.MEDIUM, _cache_truth),
]


@pytest.mark.parametrize(
    ("fault", "finding_id", "severity", "truth_of"), ZERO_COST_CASES, ids=[c[0] for c in ZERO_COST_CASES]
)
async def test_a_zero_cost_fault_is_named_alone_at_its_severity(
    fault: str, finding_id: str, severity: Severity, truth_of: ZeroCostTruth
) -> None:
    async with Lab(profile="tuned", faults=[fault], cost=TEST_COST) as lab:
        result = await _diagnose(lab)
        finding = result.finding(finding_id)
        assert finding is not None, result.to_dict()
        truth_of(lab, finding)
    assert finding.severity is severity and finding.cost_ms == 0.0
    # nothing else above low (a low finding is not above low itself)
    assert set(_above_low(result)) == ({finding_id} if severity is not Severity.LOW else set()), result.to_dict()


#: A 12 KB bearer token: what request-header-bloat prices (a lean client's headers cost nothing to price).
BLOATED_TOKEN = "Bearer " + "t" * (12 * 1024)


async def test_header_scan_is_named_alone_for_a_client_with_bloated_headers_with_its_cost() -> None:
    headers = [("Authorization", BLOATED_TOKEN)]
    async with Lab(profile="tuned", faults=["header-scan"], cost=TEST_COST) as lab:
        result = await diagnose(Target.resolve(lab.url, headers=headers, timeouts=REQUEST_TIMEOUTS), quick=True)
        held_per_kb = truth.header_scan_ms_per_kb(lab)
    assert list(_above_low(result)) == ["request-header-bloat"], result.to_dict()
    finding = _above_low(result)["request-header-bloat"]
    # the truth: what the lab's scan held requests per KB (its records), for the client's own header line
    real = held_per_kb * sum(len(k) + len(v) + 4 for k, v in headers) / 1024
    assert abs(finding.cost_ms - real) <= REL_TOLERANCE * real, (finding.cost_ms, real, finding.evidence)


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_the_tuned_lab_has_nothing_above_low(tls: bool) -> None:
    async with Lab(profile="tuned", tls=tls, cost=TEST_COST) as lab:
        result = await _diagnose(lab)
    assert _above_low(result) == {}, result.to_dict()
    clear = {c.id for c in result.clear}
    assert {"no-connection-reuse", "queue-head-of-line", "stream-coalescing-nagle"} <= clear
    assert {"batching-window", "capacity-saturation", "prefill-superlinear", "decode-host-overhead"} <= clear
    assert "prefix-cache-miss" in clear  # a repeated prefix is served from the engine's prefix cache
    assert {"trace-context-dropped", "response-cached"} <= clear  # the lab echoes the trace and caches nothing
    assert "request-header-bloat" in clear
    assert "multimodal-preprocessing" in clear  # the lab decodes its images, and does little more per MB
    assert {"rate-limited", "gateway-queueing"} <= clear  # nothing refused; a burst waited no longer than a trickle
    kv = result.outcome("kv-cache-pressure")
    assert isinstance(kv, NotTested) and "never came near filling" in kv.reason  # the cache is far from full
    if tls:
        assert {"tls-no-resumption", "http2-not-negotiated"} <= clear


async def test_the_naive_lab_shows_the_four_hidden_bottlenecks() -> None:
    async with Lab(profile="naive", cost=TEST_COST) as lab:
        result = await _diagnose(lab)
    assert set(_above_low(result)) == {
        "no-connection-reuse",
        "slow-request-parsing",
        "queue-head-of-line",
        "stream-coalescing-nagle",
    }, result.to_dict()
    reuse = result.finding("no-connection-reuse")
    assert reuse is not None and "idle" in reuse.rule  # the naive keep-alive dies during a user's pause


async def test_nagle_is_found_even_when_the_server_never_reuses_a_connection() -> None:
    async with Lab(profile="tuned", faults=["no-keepalive", "nagle"], cost=TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only="stream-coalescing-nagle")
    nagle = result.finding("stream-coalescing-nagle")
    assert nagle is not None and nagle.severity is not Severity.LOW
    assert "masked today" in nagle.cost_basis and nagle.evidence["condition"] == "delayed_ack"


@pytest.mark.parametrize("dialect", ["anthropic.messages", "ollama.chat", "openai.responses", "tgi.generate"])
async def test_the_naive_lab_shows_the_four_hidden_bottlenecks_through_another_dialect(dialect: str) -> None:
    # The same engine and faults behind the API's own path: diagnose needs nothing OpenAI-specific.
    async with Lab(profile="naive", cost=TEST_COST) as lab:
        result = await diagnose(Target.resolve(lab.origin, dialect=dialect, timeouts=REQUEST_TIMEOUTS), quick=True)
    assert set(_above_low(result)) == {
        "no-connection-reuse",
        "slow-request-parsing",
        "queue-head-of-line",
        "stream-coalescing-nagle",
    }, result.to_dict()
