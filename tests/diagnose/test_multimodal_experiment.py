"""The image experiment end to end: against the lab with and without ``slow-image-preprocessing``, a server that
refuses images, and a dialect without image parts."""

from __future__ import annotations

import pytest

from latscope.checks.multimodal import MultimodalEvidence
from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS, Context
from latscope.diagnose.experiments import multimodal
from latscope.diagnose.experiments.multimodal import planned_requests
from latscope.diagnose.result import Diagnosis
from latscope.findings import Clear, Finding, Inconclusive, NotTested, Outcome
from latscope.lab.app import Lab
from latscope.lab.faults import SLOW_IMAGE_MS_PER_MB
from latscope.wire.target import Target
from tests.diagnose import truth
from tests.support.stream_server import Received, Reply, StreamServer, models_handler, paced_stream

ID = "multimodal-preprocessing"
#: The brief's tolerance on a measured cost.
REL_TOLERANCE = 0.25


async def test_slow_image_preprocessing_is_found_with_its_cost_per_mb() -> None:
    async with Lab(profile="tuned", faults=["slow-image-preprocessing"], cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only=ID)
        real = truth.image_ms_per_mb(list(lab.records))
    finding = result.finding(ID)
    assert isinstance(finding, Finding), result.to_dict()
    # the lab's own account (decoding and its 40 ms/MB stage) and what the fault injects agree with the finding
    assert abs(finding.cost_ms - real) <= REL_TOLERANCE * real, (finding.cost_ms, real, finding.evidence)
    assert abs(finding.cost_ms - SLOW_IMAGE_MS_PER_MB) <= REL_TOLERANCE * SLOW_IMAGE_MS_PER_MB, finding.evidence
    assert finding.evidence["control"] == "user" and finding.evidence["cost_at_largest_ms"] > 30.0


def _image_requests(result: Diagnosis) -> int:
    return next(r.requests for r in result.experiments if r.name == "multimodal")


#: Pairs per round of the quick plan: every size once per repeat.
QUICK_ROUND = len(multimodal.SIZES_MB_QUICK) * multimodal.REPEATS_QUICK


async def test_a_finding_is_confirmed_by_one_more_round_and_a_clear_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = multimodal.check_multimodal_preprocessing

    def counting(ev: MultimodalEvidence, reference: object) -> Outcome:
        asked.append(len(ev.pairs))
        return real(ev, None)

    monkeypatch.setattr(multimodal, "check_multimodal_preprocessing", counting)
    async with Lab(profile="tuned", faults=["slow-image-preprocessing"], cost=truth.TEST_COST) as lab:
        found = await diagnose(lab.url, quick=True, only=ID)
    finding = found.finding(ID)
    assert isinstance(finding, Finding), found.to_dict()
    # named on the planned pairs, then confirmed on a second round: asked twice, and the finding is on both rounds
    assert asked == [QUICK_ROUND, 2 * QUICK_ROUND]
    assert finding.evidence["pairs"] == 2 * QUICK_ROUND
    assert _image_requests(found) == 2 + 2 * 2 * QUICK_ROUND
    asked.clear()

    def clear_at_once(ev: MultimodalEvidence, reference: object) -> Outcome:
        asked.append(len(ev.pairs))
        return Clear(ID, "clear (test)")

    monkeypatch.setattr(multimodal, "check_multimodal_preprocessing", clear_at_once)
    async with Lab(profile="tuned", cost=truth.TEST_COST) as lab:
        clear = await diagnose(lab.url, quick=True, only=ID)
    assert asked == [QUICK_ROUND] and _image_requests(clear) == 2 + 2 * QUICK_ROUND  # nothing more sent


async def test_an_undecided_check_gets_rounds_until_they_run_out(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def undecided(ev: MultimodalEvidence, reference: object) -> Outcome:
        asked.append(len(ev.pairs))
        return Inconclusive(ID, "undecided (test)")

    monkeypatch.setattr(multimodal, "check_multimodal_preprocessing", undecided)
    async with Lab(profile="tuned", cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only=ID)
    # asked after the planned pairs and after each added round but the last; the report's check sees them all
    assert asked == [QUICK_ROUND * (1 + r) for r in range(multimodal.EXTRA_ROUNDS)]
    assert _image_requests(result) == 2 + 2 * QUICK_ROUND * (
        1 + multimodal.EXTRA_ROUNDS
    )  # the image probe, one control probe
    outcome = result.outcome(ID)
    assert outcome is not None and outcome.evidence["pairs"] == QUICK_ROUND * (1 + multimodal.EXTRA_ROUNDS)


async def test_the_tuned_lab_decodes_images_quickly_enough_to_be_clear() -> None:
    async with Lab(profile="tuned", cost=truth.TEST_COST) as lab:
        result = await diagnose(lab.url, quick=True, only=ID)
        images = [r for r in lab.records if r.image_bytes]
    assert isinstance(result.outcome(ID), Clear), result.to_dict()
    assert images and all(r.status == 200 for r in images)  # the images really went through


async def test_a_server_that_refuses_images_leaves_the_check_not_tested_with_its_status() -> None:
    stream = paced_stream(2)

    async def text_only(request: Received, reply: Reply) -> None:
        if b'"image_url"' in request.body:
            error = {"message": "image input is not supported by this model", "type": "invalid_request_error"}
            await reply.send_json(400, {"error": error})
            return
        await stream(request, reply)

    async with StreamServer(models_handler(text_only)) as server:
        result = await diagnose(server.base_url, quick=True, only=ID)
        images = [r for r in server.requests if b'"image_url"' in r.body]
    outcome = result.outcome(ID)
    assert isinstance(outcome, NotTested), result.to_dict()
    assert "HTTP 400" in outcome.reason and "not supported" in outcome.reason
    assert len(images) == 1  # the probe, and nothing more


async def test_other_dialects_send_no_image_and_are_not_tested() -> None:
    async with Lab(profile="tuned", cost=truth.TEST_COST) as lab:
        result = await diagnose(
            Target.resolve(lab.origin, dialect="ollama.chat", timeouts=REQUEST_TIMEOUTS), quick=True, only=ID
        )
        images = [r for r in lab.records if r.image_bytes]
    outcome = result.outcome(ID)
    assert isinstance(outcome, NotTested) and "ollama.chat" in outcome.reason
    assert images == []


def test_the_quick_plan_stays_small() -> None:
    quick = Context(Target.resolve("http://x"), "m", quick=True)
    assert planned_requests(quick) == 21  # 3 probes, then 3 sizes × 3 repeats × (image, control)
    assert planned_requests(Context(Target.resolve("http://x", dialect="anthropic.messages"), "m")) == 0
