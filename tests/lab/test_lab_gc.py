"""The `latscope lab` process collects garbage only while its engine is idle (or when its memory guard says so)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from latscope.cli import lab as lab_cli
from latscope.quietgc import QuietCollector


@dataclass
class FakeScheduler:
    running: int = 0
    waiting: int = 0


@dataclass
class FakeLab:
    scheduler: FakeScheduler = field(default_factory=FakeScheduler)


def make_cycles(n: int) -> None:
    for _ in range(n):
        a: list[object] = []
        a.append(a)


async def run_for(lab: FakeLab, quiet: QuietCollector, seconds: float) -> None:
    task = asyncio.get_running_loop().create_task(lab_cli.collect_when_idle(cast(Any, lab), quiet))
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_garbage_waits_while_the_engine_is_busy_and_goes_when_it_is_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lab_cli, "IDLE_CHECK_S", 0.01)
    monkeypatch.setattr(lab_cli, "IDLE_COLLECT_MIN_OBJECTS", 100)
    quiet = QuietCollector()
    quiet.enter(rss=1 << 30)
    try:
        busy = FakeLab(FakeScheduler(running=3))
        make_cycles(500)
        await run_for(busy, quiet, 0.1)
        assert quiet.pauses_ms == []  # busy and far below the memory guard: nothing collected
        assert gc.get_count()[0] >= 500
        await run_for(FakeLab(FakeScheduler(running=0, waiting=0)), quiet, 0.1)
        assert len(quiet.pauses_ms) == 1  # collected once; afterwards too little garbage to bother
        assert gc.get_count()[0] < 100
        await run_for(FakeLab(FakeScheduler(waiting=1)), quiet, 0.05)
        assert len(quiet.pauses_ms) == 1
    finally:
        quiet.exit()
    assert gc.isenabled()
