"""The client watching itself: samples while a loop runs, saturation when its thread is busy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from latscope.load.health import ClientHealth, HealthMonitor, WorkerHealth
from latscope.quietgc import rss_bytes


async def test_the_monitor_samples_the_loop_thread_and_sees_it_busy() -> None:
    monitor = HealthMonitor(0, interval_s=0.02)
    monitor.start()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # keep the loop thread busy, yielding so the sampler can run
        end = time.monotonic() + 0.005
        while time.monotonic() < end:
            pass
        await asyncio.sleep(0)
    busy = await monitor.stop()
    assert len(busy.loop_cpu) >= 3
    monitor = HealthMonitor(1, interval_s=0.02)
    monitor.start()
    await asyncio.sleep(0.3)
    idle = await monitor.stop()
    assert len(idle.loop_cpu) >= 3
    # a ratio against the idle control in the same test, not an absolute threshold
    assert sum(busy.loop_cpu) / len(busy.loop_cpu) > 3 * sum(idle.loop_cpu) / len(idle.loop_cpu)
    assert busy.rss_max_bytes > 0


def test_saturation_needs_a_sustained_share_of_hot_samples() -> None:
    assert WorkerHealth(0, loop_cpu=[0.95, 0.95, 0.2, 0.2]).saturated
    assert not WorkerHealth(0, loop_cpu=[0.95] + [0.2] * 9).saturated


def test_merge_combines_workers() -> None:
    merged = ClientHealth.merge(
        [
            WorkerHealth(0, loop_cpu=[0.5], loop_lag_ms=[0.1], rss_max_bytes=2**20, machine_busy=[0.4]),
            WorkerHealth(1, loop_cpu=[0.7], loop_lag_ms=[0.3], rss_max_bytes=3 * 2**20, machine_busy=[0.6]),
        ]
    )
    assert merged.workers == 2 and merged.loop_cpu_max == 0.7
    assert merged.rss_total_mb == 4.0 and merged.rss_max_mb == 3.0
    assert not merged.saturated
    assert ClientHealth.from_dict(merged.to_dict()) == merged


def test_rss_is_read_on_linux() -> None:
    value = rss_bytes()
    assert value is None or value > 1_000_000


def test_a_dispatcher_spinning_towards_deadlines_is_not_saturation() -> None:
    assert not WorkerHealth(0, loop_cpu=[1.0] * 4, spin_share=[0.8] * 4).saturated
    assert WorkerHealth(0, loop_cpu=[1.0] * 4, spin_share=[0.0] * 4).saturated


async def test_the_busy_poll_sees_the_thread_off_the_cpu_but_not_busy_in_its_own_work() -> None:
    from latscope.load.runner import busy_poll

    async def with_poll(action: Callable[[], None], times: int) -> WorkerHealth:
        health = WorkerHealth(0)
        poller = asyncio.get_running_loop().create_task(busy_poll(health))
        await asyncio.sleep(0.01)
        for _ in range(times):
            action()
            await asyncio.sleep(0.002)
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        return health

    def spin() -> None:  # the loop's own work: CPU time advances with wall time
        end = time.monotonic() + 0.005
        while time.monotonic() < end:
            pass

    blocked = await with_poll(lambda: time.sleep(0.005), 5)  # off the CPU for 5 ms, five times
    busy = await with_poll(spin, 5)
    assert blocked.off_cpu_count >= 5 and blocked.off_cpu_max_ns >= 4_000_000
    assert len(blocked.off_cpu_windows) == blocked.off_cpu_count
    assert blocked.polled_ns > 0
    # a ratio against the blocked control: spinning is not counted as off-CPU (a preemption may still happen)
    assert busy.off_cpu_ns < 0.5 * blocked.off_cpu_ns
    merged = ClientHealth.merge([blocked])
    assert merged.off_cpu_share is not None and 0 < merged.off_cpu_share <= 1
    assert ClientHealth.from_dict(merged.to_dict()) == merged
    assert WorkerHealth.from_dict(blocked.to_dict()) == blocked
