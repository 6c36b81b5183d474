"""The concurrency sweep sends again a round that began on a busy server while another round of its level showed
requests waiting for a slot, and only then (:func:`latscope.diagnose.experiments.saturation._held_up`)."""

from __future__ import annotations

from latscope.checks.samples import RequestSample
from latscope.checks.saturation import SaturationEvidence, SaturationLevel, busy_at_start, check_capacity_saturation
from latscope.diagnose.experiments.saturation import _held_up
from latscope.findings import Finding, Inconclusive
from tests.checks.builders import ok

LONE_TTFT, LONE_E2E = 16.0, 66.0  # llama-cpp-python's, measured: a 50 ms stream, a wait threshold of 25 ms


def _request(ttft: float) -> RequestSample:
    return ok(ttft_after_setup_ms=ttft, e2e_after_setup_ms=ttft + 50.0)


def _round(*ttfts: float) -> tuple[tuple[RequestSample, ...], tuple[float | None, ...]]:
    first = min(ttfts)
    return tuple(_request(t) for t in ttfts), tuple(t - first for t in ttfts)


def _level(*rounds: tuple[tuple[RequestSample, ...], tuple[float | None, ...]]) -> SaturationLevel:
    return SaturationLevel(2, tuple(r[0] for r in rounds), tuple(r[1] for r in rounds))


WAITED = _round(16.0, 82.0)  # the second waited a whole stream behind the first
HELD = _round(63.6, 82.4)  # measured in a full test run: the first came 48 ms late, the second 19 ms after it
CALM = _round(16.0, 30.0)  # nobody waited, and the burst began at once


def test_a_round_that_began_on_a_busy_server_is_sent_again_when_another_round_waited() -> None:
    level = _level(HELD, WAITED)
    assert busy_at_start(level, 0, LONE_TTFT, LONE_E2E) and not busy_at_start(level, 1, LONE_TTFT, LONE_E2E)
    assert _held_up(level, LONE_TTFT, LONE_E2E, None) == 0


def test_a_calm_round_without_waiters_is_evidence_and_is_kept() -> None:
    assert _held_up(_level(CALM, WAITED), LONE_TTFT, LONE_E2E, None) is None


def test_a_level_where_nobody_waited_sends_nothing_again() -> None:
    # every burst beginning late and together is a batched prefill, judged on its lags, not a busy server
    assert _held_up(_level(HELD, HELD), LONE_TTFT, LONE_E2E, None) is None


def test_the_repeated_round_decides_and_the_one_set_aside_stays_in_the_evidence() -> None:
    lone = SaturationLevel(1, ((_request(LONE_TTFT),) * 3,))
    level = SaturationLevel(2, (WAITED[0], WAITED[0]), (WAITED[1], WAITED[1]), set_aside=(HELD[0],))
    out = check_capacity_saturation(SaturationEvidence(16, 16, (lone, level)), None)
    assert isinstance(out, Finding) and out.evidence["capacity"] == 1, out
    assert out.evidence["levels"][1]["set_aside"] == 1


def test_requests_sent_one_at_a_time_that_came_late_leave_the_sweep_undecided() -> None:
    # measured on vLLM --max-num-seqs 2 on a loaded host: lone requests at 64-101 ms against 14 ms before the sweep,
    # and no level after them told apart; a slot wait at concurrency 1 is impossible
    lone = SaturationLevel(1, (tuple(_request(t) for t in (16.0, 95.0, 101.0)),), ((None, None, None),))
    level = _level(WAITED, WAITED)
    out = check_capacity_saturation(SaturationEvidence(16, 16, (lone, level)), None)
    assert isinstance(out, Inconclusive) and "one at a time" in out.reason, out
    calm = SaturationLevel(1, (tuple(_request(t) for t in (16.0, 17.0, 16.5)),), ((None, None, None),))
    assert isinstance(check_capacity_saturation(SaturationEvidence(16, 16, (calm, level)), None), Finding)
