"""A measured step runs without the cyclic collector; the guard collects when memory grows and says so."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator

import pytest

from latscope.load.health import ClientHealth, HealthMonitor
from latscope.load.summary import summarize_step
from latscope.load.tuning import SWITCH_INTERVAL_S, StepTuning
from latscope.runs.records import REQUEST_SCHEMA

MB = 1 << 20


@pytest.fixture
def tuning() -> Iterator[StepTuning]:
    t = StepTuning(growth_bytes=100 * MB, objects=1000)
    yield t
    t.exit()


def make_cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)


def test_enter_switches_the_collector_off_and_exit_restores_it(tuning: StepTuning) -> None:
    before = sys.getswitchinterval()
    assert gc.isenabled()
    tuning.enter(rss=500 * MB)
    assert tuning.active and not gc.isenabled()
    assert gc.get_freeze_count() > 0  # what existed is out of every future scan
    assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    tuning.exit()
    assert not tuning.active and gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert sys.getswitchinterval() == before


def test_the_guard_collects_only_after_memory_grew_by_its_limit(tuning: StepTuning) -> None:
    tuning.enter(rss=500 * MB)
    make_cycles(50)
    assert tuning.check(rss=599 * MB) is None
    assert gc.get_count()[0] >= 50  # still there: nothing collected them
    pause = tuning.check(rss=601 * MB)
    assert pause is not None and pause >= 0
    assert tuning.pauses_ms == [pause]
    # growth is measured from the collection on: the same size again is no reason to collect
    assert tuning.check(rss=650 * MB) is None
    assert tuning.check(rss=702 * MB) is not None


def test_without_a_memory_reading_the_guard_counts_young_objects(tuning: StepTuning) -> None:
    tuning.enter()
    make_cycles(10)
    assert tuning.check(rss=None) is None
    make_cycles(2000)
    assert tuning.check(rss=None) is not None
    assert gc.get_count()[0] < 1000


def test_the_first_reading_becomes_the_baseline_when_enter_had_none(tuning: StepTuning) -> None:
    tuning.enter()
    assert tuning.check(rss=5000 * MB) is None
    assert tuning.check(rss=5050 * MB) is None
    assert tuning.check(rss=5101 * MB) is not None


def test_outside_a_step_the_guard_does_nothing() -> None:
    assert StepTuning(growth_bytes=1).check(rss=10**12) is None


async def test_the_monitor_runs_the_guard_and_the_report_warns() -> None:
    tuning = StepTuning(growth_bytes=1)  # any growth at all: collects at every sample after the first
    tuning.enter(rss=1)
    try:
        monitor = HealthMonitor(0, interval_s=0.01, tuning=tuning)
        monitor.start()
        await asyncio.sleep(0.1)
        health = await monitor.stop()
    finally:
        tuning.exit()
    assert health.gc_pauses_ms and health.gc_pauses_ms == tuning.pauses_ms
    merged = ClientHealth.merge([health])
    assert merged.gc_pauses == len(health.gc_pauses_ms)
    assert ClientHealth.from_dict(merged.to_dict()) == merged

    summary = summarize_step(0, "closed 1", {"kind": "closed"}, REQUEST_SCHEMA.empty_table(), {}, client=merged)
    assert any("collected garbage" in w for w in summary.warnings)
