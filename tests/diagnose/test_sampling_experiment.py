"""The sampling experiment against the lab's host-side sampling: a warm-up request, then its pairs; more pairs only
when the check cannot decide on those."""

from __future__ import annotations

import json

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


async def test_both_streams_of_a_pair_share_a_prompt_and_no_two_pairs_do(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: dict[str, str] = {}
    real = sampling.Context.spec

    def recorded(ctx: sampling.Context, prompt_tokens: int, max_tokens: int, **kwargs: object) -> object:
        spec = real(ctx, prompt_tokens, max_tokens, **kwargs)  # type: ignore[arg-type]
        if "temperature" in json.loads(spec.body):  # the sampling experiment's (the baseline's leave it unset)
            sent[f"request {len(sent)}"] = spec.body.decode()
        return spec

    monkeypatch.setattr(sampling.Context, "spec", recorded)
    async with Lab(faults=[SLOW_SAMPLING], cost=truth.TEST_COST) as lab:
        await diagnose(lab.url, only="decode-host-overhead", quick=True)
    prompts = [_prompt(body) for body in sent.values()]
    assert len(prompts) == 1 + 2 * sampling.PAIRS_QUICK
    pairs = [prompts[i : i + 2] for i in range(1, len(prompts), 2)]  # after the warm-up
    assert all(a == b for a, b in pairs), pairs
    assert len({a for a, _ in pairs} | {prompts[0]}) == len(pairs) + 1, prompts  # and none is the warm-up's
    # the two bodies of a pair still differ (their sampling parameters): no body is sent twice
    assert len(set(sent.values())) == len(sent)


def _prompt(body: str) -> str:
    messages = json.loads(body)["messages"]
    return str(messages[-1]["content"])
