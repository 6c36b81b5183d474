"""The sampling experiment against the lab's host-side sampling: a warm-up request, then its pairs; more pairs only
when the check cannot decide on those."""

from __future__ import annotations

import pytest

from latscope.diagnose import diagnose
from latscope.diagnose.experiments import sampling
from latscope.diagnose.result import Diagnosis
from latscope.findings import Finding, Inconclusive
from latscope.lab.app import Lab
from latscope.lab.faults import SLOW_SAMPLING
from tests.diagnose import truth


def _sampling_requests(result: Diagnosis) -> int:
    return next(r.requests for r in result.experiments if r.name == "sampling")


async def test_a_decisive_run_sends_its_warm_up_and_pairs_only() -> None:
    async with Lab(faults=[SLOW_SAMPLING], cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True)
    outcome = result.outcome("decode-host-overhead")
    assert isinstance(outcome, Finding), result.to_dict()
    assert len(outcome.evidence["greedy_tpots_ms"]) == sampling.PAIRS_QUICK
    assert _sampling_requests(result) == 1 + 2 * sampling.PAIRS_QUICK


async def test_an_undecided_check_gets_more_pairs_round_by_round(monkeypatch: pytest.MonkeyPatch) -> None:
    decisions: list[int] = []

    def undecided(ev: sampling.SamplingEvidence, reference: object) -> Inconclusive:
        decisions.append(len(ev.greedy))
        return Inconclusive("decode-host-overhead", "undecided (test)")

    monkeypatch.setattr(sampling, "check_decode_host_overhead", undecided)
    async with Lab(faults=[SLOW_SAMPLING], cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True)
    # asked after the planned pairs and after each round but the last
    rounds = [sampling.PAIRS_QUICK + r * sampling.EXTRA_PAIRS for r in range(sampling.EXTRA_ROUNDS)]
    assert decisions == rounds
    most = sampling.PAIRS_QUICK + sampling.EXTRA_ROUNDS * sampling.EXTRA_PAIRS
    assert _sampling_requests(result) == 1 + 2 * most
    outcome = result.outcome("decode-host-overhead")  # the real check, on every pair
    assert isinstance(outcome, Finding), result.to_dict()
    assert len(outcome.evidence["greedy_tpots_ms"]) == most


async def test_more_pairs_stop_once_the_check_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    decisions: list[int] = []
    real = sampling.check_decode_host_overhead

    def undecided_once(ev: sampling.SamplingEvidence, reference: object) -> object:
        decisions.append(len(ev.greedy))
        if len(decisions) == 1:
            return Inconclusive("decode-host-overhead", "undecided (test)")
        return real(ev, None)

    monkeypatch.setattr(sampling, "check_decode_host_overhead", undecided_once)
    async with Lab(faults=[SLOW_SAMPLING], cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True)
    assert decisions == [sampling.PAIRS_QUICK, sampling.PAIRS_QUICK + sampling.EXTRA_PAIRS]
    assert _sampling_requests(result) == 1 + 2 * (sampling.PAIRS_QUICK + sampling.EXTRA_PAIRS)
