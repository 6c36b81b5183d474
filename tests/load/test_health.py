"""The client watching itself: samples while a loop runs, saturation when its thread is busy."""

from __future__ import annotations

import asyncio
import time

from latscope.load.health import ClientHealth, HealthMonitor, WorkerHealth, rss_bytes


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
