"""The gateway's circuit breaker: its state machine on an explicit clock, then the lab's breaker in front of an
engine that fails, seen from outside (503 with Retry-After, nothing reaching the engine) and in the lab's records."""

from __future__ import annotations

import asyncio

import pytest

from latscope.cli.lab import settings_from_options
from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.breaker import Admission, BreakerConfig, BreakerState, CircuitBreaker
from latscope.lab.costmodel import CostModel
from latscope.lab.settings import LabSettings
from latscope.wire import Client


def _breaker(**config: float) -> CircuitBreaker:
    return CircuitBreaker(BreakerConfig(**config))  # type: ignore[arg-type]


def _run(breaker: CircuitBreaker, outcomes: list[bool], now_s: float = 0.0) -> list[Admission]:
    """One request per outcome (True: the upstream failed it), each admitted or not at ``now_s``."""
    answers = []
    for failed in outcomes:
        admission = breaker.admit(now_s)
        answers.append(admission)
        breaker.record(admission, failed, now_s)
    return answers


def test_it_opens_once_enough_of_the_recent_requests_failed() -> None:
    breaker = _breaker(error_ratio=0.5, window=10, min_requests=4)
    _run(breaker, [True, True, True])  # three failures of three: too few to call it a trend
    assert breaker.state is BreakerState.CLOSED
    _run(breaker, [False])  # 3 of 4 failed
    assert breaker.state is BreakerState.OPEN and breaker.opened == 1


def test_a_healthy_upstream_with_a_few_failures_keeps_it_closed() -> None:
    breaker = _breaker(error_ratio=0.5, window=10, min_requests=4)
    _run(breaker, [False, False, True, False, False, False, True, False, False, False] * 3)
    assert breaker.state is BreakerState.CLOSED and breaker.opened == 0


def test_open_it_refuses_with_the_time_left_then_lets_one_probe_through() -> None:
    breaker = _breaker(error_ratio=1.0, window=2, min_requests=2, open_s=5.0)
    _run(breaker, [True, True], now_s=100.0)
    refused = breaker.admit(101.5)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(3.5)
    assert refused.retry_after_header == b"4"  # whole seconds, rounded up
    probe = breaker.admit(105.0)
    assert probe.admitted and probe.probe and breaker.state is BreakerState.HALF_OPEN
    others = breaker.admit(105.1)
    assert not others.admitted and others.retry_after_s == 5.0  # while the probe runs, nothing else goes
    assert breaker.refused == 2


def test_the_probe_decides_closed_or_open_again_and_a_lost_probe_decides_nothing() -> None:
    breaker = _breaker(error_ratio=1.0, window=2, min_requests=2, open_s=1.0)
    _run(breaker, [True, True], now_s=0.0)
    probe = breaker.admit(1.0)
    breaker.record(probe, None, 1.0)  # its client hung up: still half-open, the next request probes
    assert breaker.state is BreakerState.HALF_OPEN
    probe = breaker.admit(1.1)
    assert probe.probe
    breaker.record(probe, True, 1.1)  # the upstream still fails: open again, from now
    assert breaker.state is BreakerState.OPEN and breaker.opened == 2
    assert not breaker.admit(2.0).admitted
    probe = breaker.admit(2.1)
    breaker.record(probe, False, 2.1)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.admit(2.2).admitted and breaker.error_ratio is None  # a fresh window


@pytest.mark.parametrize(
    "config",
    [{"error_ratio": 0.0}, {"error_ratio": 1.5}, {"window": 5, "min_requests": 6}, {"open_s": 0.0}],
)
def test_impossible_configurations_are_refused(config: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="BreakerConfig"):
        BreakerConfig(**config)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="upstream_error_rate"):
        LabSettings(upstream_error_rate=1.5)


def test_the_lab_commands_flags_set_the_breaker() -> None:
    settings = settings_from_options(
        {"circuit_breaker": True, "circuit_error_ratio": 0.25, "circuit_open_s": 2.0, "upstream_error_rate": 0.5}
    )
    assert settings.breaker == BreakerConfig(error_ratio=0.25, window=20, min_requests=10, open_s=2.0)
    assert settings.upstream_error_rate == 0.5
    assert settings_from_options({}).breaker is None


async def test_a_failing_engine_opens_the_breaker_and_a_recovered_one_closes_it() -> None:
    config = {"circuit_window": 4, "circuit_min_requests": 4, "circuit_error_ratio": 0.75, "circuit_open_s": 0.3}
    lab = Lab(circuit_breaker=True, upstream_error_rate=1.0, cost=CostModel.zero(), **config)
    async with lab, Client() as client:

        async def ask(i: int) -> tuple[int | None, str | None]:
            t = await client.request(chat_request("lab-model", f"hi {i}", 1), lab.url)
            return t.status, t.response_headers.get("retry-after")

        failing = [await ask(i) for i in range(4)]
        refused = [await ask(i) for i in range(4, 8)]
        reached = sum(1 for r in lab.records if r.circuit != "refused")
        assert lab.breaker is not None and lab.breaker.state is BreakerState.OPEN
        lab.upstream_error_rate = 0.0  # the upstream recovers
        await asyncio.sleep(0.35)
        probe = await ask(8)
        after = [await ask(i) for i in range(9, 12)]
        records = [r for r in lab.records if r.endpoint is not None]
    # the engine's own failures: 503 engine_unavailable, no Retry-After
    assert failing == [(503, None)] * 4
    # then the breaker answers for it at once, saying when to come back, and nothing reaches the engine
    assert refused == [(503, "1")] * 4
    assert reached == 4 and [r.circuit for r in records[4:8]] == ["refused"] * 4
    assert all(r.queue_ms is None for r in records[4:8])  # never scheduled
    # after open_s, one probe goes through, finds the upstream healthy and closes the breaker
    assert probe == (200, None) and records[8].circuit == "probe"
    assert [status for status, _ in after] == [200] * 3 and lab.breaker is None  # (the lab has stopped)


async def test_without_the_breaker_a_failing_engine_fails_every_request() -> None:
    async with Lab(upstream_error_rate=1.0, cost=CostModel.zero()) as lab, Client() as client:
        answers = [await client.request(chat_request("lab-model", f"hi {i}", 1), lab.url) for i in range(12)]
        records = list(lab.records)
    assert [t.status for t in answers] == [503] * 12
    assert all(r.circuit is None and r.status == 503 and "upstream failed" in (r.error or "") for r in records)
