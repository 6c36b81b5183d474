"""The fault matrix across network paths, as data: the paths, the lab cases, the findings each must give and the
ground truth its cost is checked against. tests/diagnose/test_fault_matrix_distance.py asserts them;
benchmarks/distance_matrix.py prints them as a table.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from latscope.diagnose import Diagnosis, diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.findings import Finding, Severity
from latscope.lab.app import Lab
from latscope.wire.target import Target
from tests.diagnose import truth
from tests.support.distances import FULL, FULL_PATHS, Path
from tests.support.netpath import NetworkPath

TEST_COST = truth.TEST_COST
REL_TOLERANCE = 0.25
#: Connection setup costs vary by a few ms from one connection to the next on this shared host (as on loopback).
SETUP_FLOOR_MS = 3.0
#: The naive profile's findings.
NAIVE = {"no-connection-reuse", "slow-request-parsing", "queue-head-of-line", "stream-coalescing-nagle"}


Truth = Callable[[Lab, Diagnosis, NetworkPath], Awaitable[float]]


async def _parse_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return truth.parse_ms_per_mb(list(lab.records))


async def _queue_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return truth.queue_inflation_ms(list(lab.records))


async def _nagle_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return await path.run(truth.nagle_hold_ms(lab, one_way_ms=path.one_way_delay_ms))


async def _buffer_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    max_tokens = int(result.timeline_summary["max_tokens"])
    return await path.run(truth.buffered_hold_ms(lab, max_tokens, one_way_ms=path.one_way_delay_ms))


async def _connection_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return await path.run(truth.new_connection_ms(lab))


async def _handshake_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    # the full handshake's time beyond the round trip a resumed one would still take: measured by a client of its own,
    # less the round trip the path was built with
    full = await path.run(truth.handshake_ms(lab, resumed=False))
    return full - path.rtt_ms


async def _h2_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return await path.run(truth.first_wave_e2e_ms(lab, connections=6, max_tokens=8))


async def _window_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return await path.run(truth.lone_window_wait_ms(lab))


async def _attention_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    finding = result.finding("prefill-superlinear")
    assert finding is not None
    return truth.quadratic_prefill_ms(lab, list(lab.records), finding.evidence["longest_prompt_tokens"])


async def _saturation_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    finding = result.finding("capacity-saturation")
    assert finding is not None
    evidence = finding.evidence
    return truth.sweep_queue_ms(list(lab.records), evidence["waited_at"])


async def _kv_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return truth.preempted_hold_ms(list(lab.records), truth.kv_burst(result))


async def _prefix_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    finding = result.finding("prefix-cache-miss")
    assert finding is not None
    return truth.prefix_recompute_ms(lab, list(lab.records), finding.evidence["prefix_tokens"])


async def _sampling_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    finding = result.finding("decode-host-overhead")
    assert finding is not None
    return truth.sampling_cost_ms(lab, finding.evidence["stream_tokens"])


async def _retry_after_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    return truth.retry_after_ms(list(lab.records))


async def _gateway_wait_truth(lab: Lab, result: Diagnosis, path: NetworkPath) -> float:
    finding = result.finding("gateway-queueing")
    assert finding is not None
    return truth.gateway_wait_ms(list(lab.records), finding.evidence["high_request_ids"])


class Case(NamedTuple):
    """One lab: its faults, TLS or not, the findings it must give (nothing else above low), the ground truth of the
    one whose cost is checked, and the tolerance's floor (ms)."""

    name: str
    faults: tuple[str, ...]
    tls: bool
    expected: frozenset[str]
    truth: Truth | None = None
    floor_ms: float = 0.0
    profile: str = "tuned"


def _single(fault: str, finding: str, truth_of: Truth, *, tls: bool = False, floor_ms: float = 0.0) -> Case:
    return Case(fault, (fault,), tls, frozenset({finding}), truth_of, floor_ms)


SINGLE = [
    _single("no-keepalive", "no-connection-reuse", _connection_truth, floor_ms=SETUP_FLOOR_MS),
    _single("short-keepalive", "no-connection-reuse", _connection_truth, floor_ms=SETUP_FLOOR_MS),
    _single("slow-parse", "slow-request-parsing", _parse_truth),
    _single("queue-hol", "queue-head-of-line", _queue_truth),
    _single("nagle", "stream-coalescing-nagle", _nagle_truth),
    _single("proxy-buffering", "stream-proxy-buffering", _buffer_truth),
    _single("tls-no-tickets", "tls-no-resumption", _handshake_truth, tls=True, floor_ms=SETUP_FLOOR_MS),
    _single("no-h2", "http2-not-negotiated", _h2_truth, tls=True),
    _single("batching-window", "batching-window", _window_truth),
    _single("naive-attention", "prefill-superlinear", _attention_truth),
    _single("few-slots", "capacity-saturation", _saturation_truth),
    _single("no-prefix-cache", "prefix-cache-miss", _prefix_truth),
    _single("small-kv-cache", "kv-cache-pressure", _kv_truth),
    _single("slow-sampling", "decode-host-overhead", _sampling_truth),
    _single("rate-limit", "rate-limited", _retry_after_truth),
    _single("gateway-queue", "gateway-queueing", _gateway_wait_truth),
]
TUNED = [Case("tuned", (), False, frozenset()), Case("tuned-tls", (), True, frozenset())]
NAIVE_CASE = Case("naive", (), False, frozenset(NAIVE), profile="naive")

ALL = [(path, case) for path in FULL_PATHS for case in (*TUNED, NAIVE_CASE, *SINGLE)]
BOUNDED = [
    *[(Path(20.0), case) for case in (*TUNED, NAIVE_CASE)],
    *[
        (Path(20.0), case)
        for case in SINGLE
        if case.name
        in (
            "proxy-buffering",
            "tls-no-tickets",
            "no-h2",
            "batching-window",
            "few-slots",
            "no-prefix-cache",
            "small-kv-cache",
            "rate-limit",
            "gateway-queue",
        )
    ],
    (Path(50.0), TUNED[0]),
    (Path(50.0), NAIVE_CASE),
    (Path(20.0, 20.0), NAIVE_CASE),
]
#: What the tests run: every case at every path with ``LATSCOPE_DISTANCE_MATRIX=full``, else the bounded subset.
RUN = ALL if FULL else BOUNDED


class CaseRun(NamedTuple):
    """One case diagnosed over one path: the diagnosis, the ground truth of the checked cost (None for cases without
    one), and how long the diagnosis took (s)."""

    result: Diagnosis
    truth_ms: float | None
    seconds: float

    def above_low(self) -> dict[str, Finding]:
        """The findings above low, by id."""
        return {f.id: f for f in self.result.findings if f.severity is not Severity.LOW}

    def cost_ms(self, case: Case) -> float | None:
        """The checked finding's cost, None when the case checks none or the finding is missing."""
        if case.truth is None or len(case.expected) != 1:
            return None
        finding = self.above_low().get(next(iter(case.expected)))
        return None if finding is None else finding.cost_ms

    def cost_within_tolerance(self, case: Case) -> bool:
        """The checked cost is within :data:`REL_TOLERANCE` of the truth (or the case's floor, ms)."""
        cost = self.cost_ms(case)
        if self.truth_ms is None:
            return case.truth is None
        return cost is not None and abs(cost - self.truth_ms) <= max(REL_TOLERANCE * self.truth_ms, case.floor_ms)


async def run_case(net: NetworkPath, case: Case, *, quick: bool = True) -> CaseRun:
    """Diagnose ``case``'s lab, served at ``net.server_host``, from the far end of ``net``; then measure the truth."""
    settings = {"profile": case.profile, "faults": case.faults, "tls": case.tls}
    async with Lab(cost=TEST_COST, truth=True, host=net.server_host, **settings) as lab:
        ca = str(lab.cert_path) if lab.cert_path is not None else None
        started = time.monotonic()
        result = await net.run(
            diagnose(Target.resolve(lab.url, ca_file=ca, timeouts=REQUEST_TIMEOUTS), quick=quick, keep_timelines=True)
        )
        seconds = time.monotonic() - started
        real = None if case.truth is None else await case.truth(lab, result, net)
    return CaseRun(result, real, seconds)
