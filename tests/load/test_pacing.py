"""Pacing on absolute deadlines: never early, and lateness does not carry over to later arrivals."""

from __future__ import annotations

import asyncio
import time

from latscope.load.pacing import sleep_until


async def test_never_wakes_before_the_deadline() -> None:
    for spin_ns in (1_500_000, 0):
        for offset_us in (0, 50, 300, 2500):
            deadline = time.monotonic_ns() + offset_us * 1000
            late = await sleep_until(deadline, spin_ns)
            assert late >= 0
            assert time.monotonic_ns() >= deadline


async def test_a_deadline_already_past_returns_its_lateness_at_once() -> None:
    deadline = time.monotonic_ns() - 5_000_000
    late = await sleep_until(deadline)
    assert late >= 5_000_000


async def test_a_stall_does_not_shift_later_deadlines() -> None:
    # 60 arrivals 1 ms apart; the loop is blocked for 20 ms at arrival 10. With absolute deadlines the dispatcher
    # catches up (the arrivals after the stall fire back to back) and the last ones are on time again.
    gap_ns, stall_ns = 1_000_000, 20_000_000
    start = time.monotonic_ns() + 2_000_000
    lags = []
    for i in range(60):
        lags.append(await sleep_until(start + i * gap_ns))
        if i == 10:
            end = time.monotonic_ns() + stall_ns
            while time.monotonic_ns() < end:
                pass
    assert lags[11] > stall_ns // 2  # the stall is recorded as lateness, not hidden
    assert min(lags[-10:]) < stall_ns // 4  # … and not carried forward: the schedule is back on time


async def test_spinning_keeps_the_loop_serving_other_tasks() -> None:
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await sleep_until(time.monotonic_ns() + 1_000_000, spin_ns=2_000_000)  # all spin
    task.cancel()
    assert ticks > 10
