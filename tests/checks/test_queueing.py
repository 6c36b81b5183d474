"""``queue-head-of-line`` on hand-built evidence: the short request's inflation in long prefills."""

from __future__ import annotations

import pytest

from latscope.checks.queueing import QueueEvidence, check_queue_head_of_line
from latscope.checks.samples import RequestSample
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, failed

SHORT = (4.0, 4.2, 3.9, 4.1, 4.0)
LONG = (104.0, 105.0)  # a 100 ms prefill


def evidence(contended: tuple[float, ...], **overrides: object) -> QueueEvidence:
    fields: dict[str, object] = {
        "short_prompt_tokens": 16,
        "long_prompt_tokens": 8192,
        "longs_per_round": 3,
        "short_alone_ms": SHORT,
        "long_alone_ms": LONG,
        "short_contended_ms": contended,
    }
    fields.update(overrides)
    return QueueEvidence(**fields)  # type: ignore[arg-type]


def test_finding_when_a_short_request_waits_for_every_long_prefill_ahead() -> None:
    out = check_queue_head_of_line(evidence((290.0, 300.0, 296.0)), REF)
    assert isinstance(out, Finding) and out.id == "queue-head-of-line"
    assert out.cost_ms == pytest.approx(292.1)  # the median 296 − the fastest short request alone, 3.9
    assert out.severity is Severity.HIGH and out.confidence is Confidence.MEDIUM
    assert out.evidence["inflation_in_long_prefills"] > 2.8 and "3 requests" in out.cost_basis


def test_server_reported_queue_time_confirms_the_finding() -> None:
    out = check_queue_head_of_line(evidence((290.0, 300.0), server_queue_ms=(280.0, 290.0)), REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.HIGH


def test_clear_when_the_short_request_waits_at_most_one_step() -> None:
    out = check_queue_head_of_line(evidence((48.0, 52.0, 50.0)), REF)
    assert isinstance(out, Clear) and "not queued" in out.reason


def test_inconclusive_between_the_thresholds() -> None:
    out = check_queue_head_of_line(evidence((150.0, 155.0)), REF)
    assert isinstance(out, Inconclusive) and "more rounds" in out.reason


def test_inconclusive_when_long_prompts_prefill_too_fast_to_tell() -> None:
    out = check_queue_head_of_line(evidence((9.0, 9.5), long_alone_ms=(8.0, 8.2)), REF)
    assert isinstance(out, Inconclusive) and "too little prefill" in out.reason


def test_not_tested_without_contended_rounds() -> None:
    out = check_queue_head_of_line(evidence((), failures=(failed("round 1 long 1"),)), REF)
    assert isinstance(out, NotTested) and "429" in out.reason


def test_not_tested_with_a_single_long_request_in_flight() -> None:
    out = check_queue_head_of_line(evidence((200.0,), longs_per_round=1), REF)
    assert isinstance(out, NotTested)


def test_not_tested_when_the_target_misbehaves() -> None:
    bad = tuple(failed(f"round {i} long 1") for i in range(8))
    out = check_queue_head_of_line(evidence((290.0,), failures=bad), REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason


def test_refused_long_prompts_during_sizing_are_not_misbehaviour() -> None:
    refusals = tuple(failed(f"long alone {n} tokens", status=400) for n in (32768, 16384, 8192))
    out = check_queue_head_of_line(evidence((290.0, 300.0, 296.0), long_alone_failures=refusals), REF)
    assert isinstance(out, Finding)


def test_the_same_refusals_elsewhere_in_the_experiment_are_misbehaviour() -> None:
    refusals = tuple(failed(f"round {n} long 1", status=400) for n in range(1, 9))
    out = check_queue_head_of_line(evidence((290.0, 300.0, 296.0), failures=refusals), REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason


def empty_stream(label: str) -> RequestSample:
    """A ``200`` stream that ended with no event at all: how llama-cpp-python refuses a prompt over its context."""
    return RequestSample(label, error_kind="empty", error_phase="stream", status=200, events=0)


def test_long_prompts_refused_with_an_empty_stream_are_not_misbehaviour_either() -> None:
    # llama-cpp-python answers a streamed prompt over its context with 200 and no event at all
    refusals = tuple(empty_stream(f"long alone {n} tokens") for n in (4096, 2048, 1024, 512))
    out = check_queue_head_of_line(evidence((290.0, 300.0, 296.0), long_alone_failures=refusals), REF)
    assert isinstance(out, Finding)


def test_not_tested_with_the_reason_when_every_long_prompt_is_refused() -> None:
    refusals = tuple(empty_stream(f"long alone {n} tokens") for n in (1024, 512, 256, 128, 64))
    out = check_queue_head_of_line(
        evidence((), long_alone_ms=(), long_prompt_tokens=64, long_alone_failures=refusals), REF
    )
    assert isinstance(out, NotTested)
    assert "refused every long prompt, down to about 64 tokens" in out.reason and "no token" in out.reason


def test_a_server_that_prefills_one_request_at_a_time_is_named_in_the_rule_and_the_fix() -> None:
    # each round's last long request reached its first token after three prefills (100 ms each): served serially
    serial = ((104.0, 204.0, 304.0), (105.0, 203.0, 306.0))
    out = check_queue_head_of_line(evidence((290.0, 300.0), long_contended_ms=serial), REF)
    assert isinstance(out, Finding) and out.evidence["long_prefills_in_parallel"] == 1.0
    assert "one at a time" in out.rule and "parallel slots" in out.fix


def test_a_server_that_batches_the_long_prefills_is_not_called_serial() -> None:
    batched = ((110.0, 111.0, 112.0),)  # all three prefilled together
    out = check_queue_head_of_line(evidence((290.0, 300.0), long_contended_ms=batched), REF)
    assert isinstance(out, Finding) and out.evidence["long_prefills_in_parallel"] > 2.5
    assert "one at a time" not in out.rule


def test_rounds_that_all_waited_for_the_queue_are_a_finding_however_much_they_differ() -> None:
    # two rounds, 2.4 and 3.6 long prefills: where the short request met the running prefill differs, both queued
    out = check_queue_head_of_line(evidence((245.0, 365.0)), REF)
    assert isinstance(out, Finding) and out.evidence["every_round_held"] is True


def test_a_spread_that_reaches_below_the_finding_ratio_still_needs_to_clear_the_noise() -> None:
    out = check_queue_head_of_line(evidence((110.0, 430.0)), REF)
    assert isinstance(out, Inconclusive) and out.evidence["every_round_held"] is False
