"""The sampling experiment against the lab's host-side sampling: a warm-up request, then its pairs; more pairs only
when the check cannot decide on those; once the set costs, each parameter group priced apart (the tests of the first
phase leave the groups out, so they count its requests alone)."""

from __future__ import annotations

import json

import pytest

from latscope.diagnose import diagnose
from latscope.diagnose.experiments import sampling
from latscope.diagnose.result import Diagnosis
from latscope.findings import Clear, Finding, Inconclusive
from latscope.lab.app import Lab
from latscope.lab.faults import SLOW_SAMPLING
from tests.diagnose import truth


def _sampling_requests(result: Diagnosis) -> int:
    return next(r.requests for r in result.experiments if r.name == "sampling")


@pytest.fixture
def no_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling, "GROUPS", {})


@pytest.mark.usefixtures("no_groups")
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
    most = sampling.PAIRS_QUICK + sampling.EXTRA_ROUNDS * sampling.EXTRA_PAIRS
    assert decisions == [*rounds, most]  # and on every pair, whether to price the groups apart
    assert _sampling_requests(result) == 1 + 2 * most
    outcome = result.outcome("decode-host-overhead")  # the real check, on every pair
    assert isinstance(outcome, Finding), result.to_dict()
    assert len(outcome.evidence["greedy_tpots_ms"]) == most


@pytest.mark.usefixtures("no_groups")
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
    decided = sampling.PAIRS_QUICK + sampling.EXTRA_PAIRS
    assert decisions == [sampling.PAIRS_QUICK, decided, decided]  # the last: whether to price the groups apart
    assert _sampling_requests(result) == 1 + 2 * (sampling.PAIRS_QUICK + sampling.EXTRA_PAIRS)


@pytest.mark.usefixtures("no_groups")
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


#: Host-side logprobs only (the other paths on the device), as llama-cpp-python measured: 5 ms per step for them.
LOGPROBS_ONLY = truth.TEST_COST.with_overrides(sampling_ms=5.0, host_sampling_paths=frozenset({"logprobs"}))


async def test_each_group_is_priced_apart_and_the_finding_names_the_one_that_costs() -> None:
    async with Lab(cost=LOGPROBS_ONLY) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True)
    outcome = result.outcome("decode-host-overhead")
    assert isinstance(outcome, Finding), result.to_dict()
    verdicts = {name: g["verdict"] for name, g in outcome.evidence["by_parameter"].items()}
    assert verdicts == {"nucleus": "free", "penalties": "free", "logprobs": "costs"}, outcome.evidence
    assert "logprobs" in outcome.fix and "penalties" not in outcome.fix and "Top-p" not in outcome.fix
    assert "logprobs +" in outcome.rule and "nucleus, penalties free" in outcome.rule, outcome.rule


async def test_a_cost_every_group_pays_names_them_all() -> None:
    async with Lab(faults=[SLOW_SAMPLING], cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True)
    outcome = result.outcome("decode-host-overhead")
    assert isinstance(outcome, Finding), result.to_dict()
    assert {g["verdict"] for g in outcome.evidence["by_parameter"].values()} == {"costs"}, outcome.evidence


async def test_no_group_is_priced_apart_when_the_set_is_clear() -> None:
    async with Lab(cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, only="decode-host-overhead", quick=True, keep_timelines=True)
    outcome = result.outcome("decode-host-overhead")
    labels = [t.label or "" for t in result.timelines]
    assert isinstance(outcome, Clear) and any(label.startswith("greedy") for label in labels), result.to_dict()
    assert not any("apart" in label for label in labels), labels
