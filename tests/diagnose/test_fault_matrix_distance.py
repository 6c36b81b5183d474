"""The fault matrix across a real network path: the client in a network namespace tens of milliseconds away from
the lab (tests/support/netpath.py: every packet delayed by a userspace relay, so TCP runs end to end), optionally
behind a bandwidth limit. Each fault must still give its finding (medium or high) and nothing else above low, with its
cost within ±25 % of the ground truth measured over the same path; the tuned lab nothing above low.

Every case runs at every distance with ``LATSCOPE_DISTANCE_MATRIX=full`` (about 25 minutes; ``benchmarks/
distance_matrix.py`` prints the same as a table). By default a bounded subset runs (a few minutes): at 20 ms the
tuned lab, the naive one (four faults at once) and the faults it lacks; at 50 ms and at 20 ms behind 20 Mbit/s the
tuned and naive labs.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import NamedTuple

import pytest

from latscope.diagnose import Diagnosis, diagnose
from latscope.findings import Finding, Severity
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from tests.diagnose import truth
from tests.support.diagnosis import explain
from tests.support.netpath import NetworkPath, network_path

#: As the loopback fault matrix (tests/diagnose/test_fault_matrix.py).
TEST_COST = CostModel.default().with_overrides(prefill_per_token_ms=0.02, decode_base_ms=6.0)
REL_TOLERANCE = 0.25
#: Connection setup costs vary by a few ms from one connection to the next on this shared host (as on loopback).
SETUP_FLOOR_MS = 3.0
#: The naive profile's findings.
NAIVE = {"no-connection-reuse", "slow-request-parsing", "queue-head-of-line", "stream-coalescing-nagle"}

pytestmark = pytest.mark.timeout(240)


class Path(NamedTuple):
    """A network path: one-way delay (ms) and bandwidth limit (Mbit/s each way, None for none)."""

    one_way_ms: float
    rate_mbit: float | None = None

    def __str__(self) -> str:
        limit = f"-{self.rate_mbit:g}mbit" if self.rate_mbit else ""
        return f"{self.one_way_ms:g}ms{limit}"


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
]
TUNED = [Case("tuned", (), False, frozenset()), Case("tuned-tls", (), True, frozenset())]
NAIVE_CASE = Case("naive", (), False, frozenset(NAIVE), profile="naive")

PATHS = [Path(20.0), Path(50.0), Path(20.0, 20.0), Path(0.0)]
ALL = [(path, case) for path in PATHS for case in (*TUNED, NAIVE_CASE, *SINGLE)]
BOUNDED = [
    *[(Path(20.0), case) for case in (*TUNED, NAIVE_CASE)],
    *[(Path(20.0), case) for case in SINGLE if case.name in ("proxy-buffering", "tls-no-tickets", "no-h2")],
    (Path(50.0), TUNED[0]),
    (Path(50.0), NAIVE_CASE),
    (Path(20.0, 20.0), NAIVE_CASE),
]
RUN = ALL if os.environ.get("LATSCOPE_DISTANCE_MATRIX") == "full" else BOUNDED


def _above_low(result: Diagnosis) -> dict[str, Finding]:
    return {f.id: f for f in result.findings if f.severity is not Severity.LOW}


@pytest.mark.parametrize(("path", "case"), RUN, ids=[f"{p}-{c.name}" for p, c in RUN])
async def test_each_fault_is_named_alone_with_its_cost_across_a_network_path(path: Path, case: Case) -> None:
    with network_path(delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net:
        lab_settings = {"profile": case.profile, "faults": case.faults, "tls": case.tls}
        async with Lab(cost=TEST_COST, truth=True, host=net.server_host, **lab_settings) as lab:
            ca = str(lab.cert_path) if lab.cert_path is not None else None
            result = await net.run(diagnose(lab.url, ca_file=ca, quick=True))
            found = _above_low(result)
            assert set(found) == case.expected, explain(result)
            real = None if case.truth is None else await case.truth(lab, result, net)
    rtt = result.target["rtt_ms"]
    assert rtt is not None and rtt >= 2 * path.one_way_ms  # the diagnosis saw the distance it was put at
    if real is not None:
        (finding_id,) = case.expected
        cost = found[finding_id].cost_ms
        assert abs(cost - real) <= max(REL_TOLERANCE * real, case.floor_ms), (cost, real, explain(result))
