"""gateway-overhead against the lab: a converting hop in front of an upstream lab that also serves directly
(:class:`~latscope.lab.hop.HopLab`). The fault gives the finding at the hop's cost (±25 %, against what the hop
itself recorded spending on the diagnosis's own requests), and nothing else above low; a zero-cost hop (a thin
proxy) is clear; without ``--direct`` nothing is sent and the check says to pass it.
"""

from __future__ import annotations

import statistics

from latscope.diagnose import diagnose
from latscope.diagnose.experiments import overhead
from latscope.findings import Clear, NotTested, Severity
from latscope.lab.app import Lab
from latscope.lab.hop import HopLab, HopRecord
from tests.diagnose import truth

TEST_COST = truth.TEST_COST
REL_TOLERANCE = 0.25
#: The lab's chat stream opens with a chunk that carries only the role: its first token is its second chunk, so a
#: converting hop has spent its request cost and two chunk costs before the first token leaves it.
CHUNKS_TO_FIRST_TOKEN = 2


def _pair_records(lab: HopLab) -> list[HopRecord]:
    """The hop's records of the comparison's gateway requests: the last :data:`overhead.PAIRS` streams of its
    length (what runs after it, the rate-limit probe, streams one token)."""
    streams = [r for r in lab.hop_records if r.chunks >= overhead.MAX_TOKENS]
    return streams[-overhead.PAIRS :]


def _first_token_truth_ms(records: list[HopRecord]) -> float:
    return statistics.median(r.request_ms + sum(r.leading_chunks_ms[:CHUNKS_TO_FIRST_TOKEN]) for r in records)


async def test_the_fault_alone_gives_the_finding_at_the_hops_cost_and_nothing_else_above_low() -> None:
    async with HopLab(faults=["gateway-overhead"], cost=TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, direct_url=lab.direct_url)
        records = _pair_records(lab)
    above_low = [f.id for f in result.findings if f.severity is not Severity.LOW]
    assert above_low == ["gateway-overhead"], result.to_dict()
    finding = result.finding("gateway-overhead")
    assert finding is not None
    real = _first_token_truth_ms(records)
    assert abs(finding.cost_ms - real) <= REL_TOLERANCE * real, (finding.cost_ms, real, finding.evidence)


async def test_the_per_request_and_per_chunk_costs_are_told_apart() -> None:
    async with HopLab(gateway_hop_ms=10.0, gateway_chunk_ms=3.0, cost=TEST_COST) as lab:
        result = await diagnose(lab.url, only="gateway-overhead", quick=True, direct_url=lab.direct_url)
        records = _pair_records(lab)
    finding = result.finding("gateway-overhead")
    assert finding is not None, result.to_dict()
    real = _first_token_truth_ms(records)
    assert abs(finding.cost_ms - real) <= REL_TOLERANCE * real, (finding.cost_ms, real, finding.evidence)
    ev = finding.evidence
    request = statistics.median(r.request_ms for r in records)
    head = ev["head_difference"]["median_ms"]
    assert abs(head - request) <= REL_TOLERANCE * request, (head, request, ev)
    chunk = statistics.median(r.chunk_ms / r.chunks for r in records)
    delay = ev["chunk_delay"]["median_ms"]
    assert abs(delay - chunk) <= REL_TOLERANCE * chunk + 0.5, (delay, chunk, ev)  # 0.5 ms: one chunk's jitter
    # 3 ms per chunk is well under the upstream's 6 ms decode step: the stream is delayed, not slowed
    assert abs(ev["gap_growth"]["median_ms"]) < 1.0, ev
    assert ev["direct_url"] == lab.direct_url and ev["gateway_address"] != ev["direct_address"]


async def test_a_thin_proxy_without_the_fault_is_clear() -> None:
    async with HopLab(gateway_hop_ms=0.0, gateway_chunk_ms=0.0, cost=TEST_COST) as lab:
        assert "gateway-overhead" not in lab.faults
        result = await diagnose(lab.url, only="gateway-overhead", quick=True, direct_url=lab.direct_url)
    outcome = result.outcome("gateway-overhead")
    assert isinstance(outcome, Clear), result.to_dict()
    assert outcome.evidence["ttft_difference"]["median_ms"] < outcome.evidence["threshold_ms"]


async def test_without_direct_nothing_is_compared_and_the_reason_says_to_pass_it() -> None:
    async with Lab(cost=TEST_COST) as lab:
        result = await diagnose(lab.url, only="gateway-overhead", quick=True)
    outcome = result.outcome("gateway-overhead")
    assert isinstance(outcome, NotTested) and "--direct UPSTREAM_URL" in outcome.reason
    run = next(r for r in result.experiments if r.name == "overhead")
    assert run.status == "ok" and run.requests == 0


async def test_the_target_itself_as_direct_is_not_tested() -> None:
    async with Lab(cost=TEST_COST) as lab:
        result = await diagnose(lab.url, only="gateway-overhead", quick=True, direct_url=lab.origin)
    outcome = result.outcome("gateway-overhead")
    assert isinstance(outcome, NotTested) and "the target itself" in outcome.reason
