"""The load generator watching itself: CPU of its event-loop thread, event-loop lag, memory.

A client whose event loop is saturated stamps reads late and dispatches requests late, so its measurements describe
itself rather than the server. Each worker runs a :class:`HealthMonitor` that samples, every
:data:`SAMPLE_INTERVAL_S`:

* the CPU time of the event-loop thread (``time.thread_time``: the thread that stamps reads), as a fraction of one
  core, and the share of the time the open-loop dispatcher spent spinning towards its deadlines
  (:mod:`latscope.load.pacing`). A spin yields to every other task at each turn, so a spinning loop reads as busy
  without being short of time: CPU only counts towards saturation in samples without spinning, and loop lag (which
  a spin does not cause) decides for the others;
* the event loop's lag: how late a timer callback runs beyond its due time (includes the loop's ~1 ms timer
  granularity, so values under ~1.1 ms mean "not lagging");
* every :data:`SLOW_PROBE_EVERY` samples (reading ``/proc`` costs the loop thread more): the process's resident
  memory (``/proc/self/statm``, Linux) and the whole machine's CPU use (``/proc/stat``), to show when the target and
  the client compete for cores;
* with ``--busy-poll``, the windows in which the loop thread was off the CPU (the machine preempted it): no client
  can stamp a read during one, so they mark where measured delays are the machine's, not the client's;
* the pauses of the garbage-collection guard (:mod:`latscope.quietgc`), which it runs with the slow probes.

:class:`ClientHealth` merges the workers' samples for ``run.json`` and decides whether to warn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from latscope.load.pacing import SPIN
from latscope.load.stats import Dist, describe
from latscope.load.tuning import StepTuning
from latscope.quietgc import rss_bytes

#: Seconds between samples: often enough for loop-lag percentiles over a short step, rare enough to cost nothing.
SAMPLE_INTERVAL_S = 0.1

#: The probes that read ``/proc`` (machine CPU, memory) and the garbage-collection guard run every this many samples:
#: in a process busy with thousands of sockets each read costs ~150 µs of the loop thread (measured), a stall the
#: loop-lag and CPU samples (a few µs) do not make.
SLOW_PROBE_EVERY = 10

#: A loop thread above this fraction of one core has no slack left: read stamps and dispatches start to queue.
SATURATED_CPU = 0.90

#: Share of samples above :data:`SATURATED_CPU` that makes a worker "saturated" (brief spikes are normal).
SATURATED_SHARE = 0.25

#: A busy-poll turn longer than the thread's CPU time in it by this much (ns) is a window off the CPU.
OFF_CPU_MIN_NS = 200_000

#: Off-CPU windows kept per worker with their times (the count, total and maximum cover all of them).
MAX_OFF_CPU_WINDOWS = 1000

#: Share of all the machine's cores busy above which other processes compete with the client for CPU.
MACHINE_BUSY = 0.90

#: Timer lateness that means the loop is behind, in ms: twice the ~1 ms timer granularity.
LAGGING_MS = 2.0


def machine_cpu_times() -> tuple[int, int] | None:
    """``(busy, total)`` jiffies of all CPUs since boot (Linux ``/proc/stat``), None elsewhere."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest times are already inside user/nice
    return total - idle, total


def available_cores() -> int:
    """Cores this process may run on (affinity mask when the OS exposes it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(slots=True)
class WorkerHealth:
    """One worker's samples (fractions of one core; lag in ms; memory in bytes)."""

    worker: int
    loop_cpu: list[float] = field(default_factory=list)
    spin_share: list[float] = field(default_factory=list)  #: per sample: share of wall time in pacing spins
    loop_lag_ms: list[float] = field(default_factory=list)
    rss_max_bytes: int = 0
    machine_busy: list[float] = field(default_factory=list)  #: fraction of all cores busy, whole machine
    gc_pauses_ms: list[float] = field(default_factory=list)  #: guarded garbage collections during the step, ms
    polled_ns: int = 0  #: wall time the busy poll watched (0 without --busy-poll)
    off_cpu_count: int = 0  #: windows off the CPU seen by the busy poll
    off_cpu_ns: int = 0  #: their total off-CPU time
    off_cpu_max_ns: int = 0
    off_cpu_windows: list[tuple[int, int]] = field(default_factory=list)  #: (start, end), monotonic ns; the first ones

    def add_off_cpu(self, start_ns: int, end_ns: int, off_ns: int) -> None:
        """Record a window in which the loop thread was off the CPU for ``off_ns``."""
        self.off_cpu_count += 1
        self.off_cpu_ns += off_ns
        self.off_cpu_max_ns = max(self.off_cpu_max_ns, off_ns)
        if len(self.off_cpu_windows) < MAX_OFF_CPU_WINDOWS:
            self.off_cpu_windows.append((start_ns, end_ns))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (sent from worker processes to the parent)."""
        return {
            "worker": self.worker,
            "loop_cpu": self.loop_cpu,
            "spin_share": self.spin_share,
            "loop_lag_ms": self.loop_lag_ms,
            "rss_max_bytes": self.rss_max_bytes,
            "machine_busy": self.machine_busy,
            "gc_pauses_ms": self.gc_pauses_ms,
            "polled_ns": self.polled_ns,
            "off_cpu_count": self.off_cpu_count,
            "off_cpu_ns": self.off_cpu_ns,
            "off_cpu_max_ns": self.off_cpu_max_ns,
            "off_cpu_windows": [list(w) for w in self.off_cpu_windows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerHealth:
        """Inverse of :meth:`to_dict`."""
        return cls(
            worker=int(data["worker"]),
            loop_cpu=[float(v) for v in data.get("loop_cpu", [])],
            spin_share=[float(v) for v in data.get("spin_share", [])],
            loop_lag_ms=[float(v) for v in data.get("loop_lag_ms", [])],
            rss_max_bytes=int(data.get("rss_max_bytes", 0)),
            machine_busy=[float(v) for v in data.get("machine_busy", [])],
            gc_pauses_ms=[float(v) for v in data.get("gc_pauses_ms", [])],
            polled_ns=int(data.get("polled_ns", 0)),
            off_cpu_count=int(data.get("off_cpu_count", 0)),
            off_cpu_ns=int(data.get("off_cpu_ns", 0)),
            off_cpu_max_ns=int(data.get("off_cpu_max_ns", 0)),
            off_cpu_windows=[(int(a), int(b)) for a, b in data.get("off_cpu_windows", [])],
        )

    @property
    def saturated(self) -> bool:
        """True when the loop thread ran above :data:`SATURATED_CPU` without pacing spins in at least
        :data:`SATURATED_SHARE` of the samples."""
        if not self.loop_cpu:
            return False
        spins = self.spin_share if len(self.spin_share) == len(self.loop_cpu) else [0.0] * len(self.loop_cpu)
        hot = sum(1 for cpu, spin in zip(self.loop_cpu, spins, strict=True) if cpu >= SATURATED_CPU and spin < 0.1)
        return hot / len(self.loop_cpu) >= SATURATED_SHARE


class HealthMonitor:
    """Samples the current event loop's thread while a step runs. Start with :meth:`start`, end with :meth:`stop`."""

    def __init__(self, worker: int, interval_s: float = SAMPLE_INTERVAL_S, tuning: StepTuning | None = None) -> None:
        self.health = WorkerHealth(worker)
        self.interval_s = interval_s
        self.tuning = tuning  #: the step's interpreter settings: its GC guard runs with the slow probes
        self._task: asyncio.Task[None] | None = None
        self._machine: tuple[int, int] | None = None  #: the last /proc/stat reading
        self._machine_busy: float | None = None  #: the latest machine busy share

    def start(self) -> None:
        """Begin sampling on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="latscope-health")

    async def stop(self) -> WorkerHealth:
        """Stop sampling; return the samples."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.health

    async def _run(self) -> None:
        h = self.health
        last_cpu = time.thread_time()
        last_spin = SPIN.spin_ns
        last_wall = time.monotonic()
        self._machine = machine_cpu_times()
        samples = 0
        while True:
            due = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            woke = time.monotonic()
            h.loop_lag_ms.append(max(0.0, (woke - due) * 1000.0))
            cpu, spin = time.thread_time(), SPIN.spin_ns
            if woke > last_wall:
                h.loop_cpu.append((cpu - last_cpu) / (woke - last_wall))
                h.spin_share.append(min(1.0, (spin - last_spin) / 1e9 / (woke - last_wall)))
            last_cpu, last_spin, last_wall = cpu, spin, woke
            if samples % SLOW_PROBE_EVERY == 0:
                self._slow_probes()
            samples += 1
            if self._machine_busy is not None:
                # the latest reading at every sample: aligned with the lag samples
                h.machine_busy.append(self._machine_busy)

    def _slow_probes(self) -> None:
        """Machine CPU (since the previous reading), memory, and the garbage-collection guard."""
        h = self.health
        machine, last = machine_cpu_times(), self._machine
        if machine is not None and last is not None and machine[1] > last[1]:
            self._machine_busy = (machine[0] - last[0]) / (machine[1] - last[1])
        self._machine = machine
        rss = rss_bytes()
        if rss is not None and rss > h.rss_max_bytes:
            h.rss_max_bytes = rss
        if self.tuning is not None:
            pause = self.tuning.check(rss)
            if pause is not None:
                h.gc_pauses_ms.append(pause)


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """The client's health over one step, merged across workers."""

    workers: int
    loop_cpu_mean: float | None  #: mean fraction of one core used by a worker's loop thread
    loop_cpu_max: float | None  #: highest sample, any worker
    spin_share_mean: float | None  #: mean share of wall time the open-loop dispatcher spent in pacing spins
    saturated_workers: int  #: workers whose loop thread was saturated (see :attr:`WorkerHealth.saturated`)
    loop_lag_ms: Dist | None  #: timer lateness samples, all workers (ms)
    rss_max_mb: float | None  #: highest resident memory of any one worker, MiB
    rss_total_mb: float | None  #: sum of the workers' highest resident memory, MiB
    machine_busy_mean: float | None  #: mean fraction of all the machine's cores busy (client + target + others)
    lagging_cpu_mean: float | None = None  #: mean loop CPU over the samples whose lag exceeded LAGGING_MS
    lagging_machine_busy_mean: float | None = None  #: mean machine busy share over those samples
    gc_pauses: int = 0  #: guarded garbage collections, all workers (see :mod:`latscope.load.tuning`)
    off_cpu_share: float | None = None  #: --busy-poll: share of the polled time the loop threads were off the CPU
    off_cpu_max_ms: float | None = None  #: --busy-poll: the longest such window, ms
    off_cpu_windows: list[tuple[int, int, int]] = field(default_factory=list)  #: (worker, start, end) monotonic ns
    gc_pause_max_ms: float | None = None  #: the longest of them, ms

    @property
    def saturated(self) -> bool:
        """True when any worker was saturated or the loop lagged (p99 beyond :data:`LAGGING_MS`)."""
        lagging = self.loop_lag_ms is not None and self.loop_lag_ms.p99 > LAGGING_MS
        return self.saturated_workers > 0 or lagging

    @classmethod
    def merge(cls, workers: list[WorkerHealth]) -> ClientHealth:
        """Merge the workers' samples."""
        cpu = [v for w in workers for v in w.loop_cpu]
        spin = [v for w in workers for v in w.spin_share]
        lag = [v for w in workers for v in w.loop_lag_ms]
        busy = [v for w in workers for v in w.machine_busy]
        rss = [w.rss_max_bytes for w in workers if w.rss_max_bytes]
        pauses = [v for w in workers for v in w.gc_pauses_ms]
        lag_cpu, lag_busy = _lagging_samples(workers)
        polled = sum(w.polled_ns for w in workers)
        return cls(
            workers=len(workers),
            loop_cpu_mean=sum(cpu) / len(cpu) if cpu else None,
            loop_cpu_max=max(cpu) if cpu else None,
            spin_share_mean=sum(spin) / len(spin) if spin else None,
            saturated_workers=sum(1 for w in workers if w.saturated),
            loop_lag_ms=describe(lag),
            rss_max_mb=max(rss) / 2**20 if rss else None,
            rss_total_mb=sum(rss) / 2**20 if rss else None,
            machine_busy_mean=sum(busy) / len(busy) if busy else None,
            lagging_cpu_mean=sum(lag_cpu) / len(lag_cpu) if lag_cpu else None,
            lagging_machine_busy_mean=sum(lag_busy) / len(lag_busy) if lag_busy else None,
            gc_pauses=len(pauses),
            gc_pause_max_ms=max(pauses) if pauses else None,
            off_cpu_share=sum(w.off_cpu_ns for w in workers) / polled if polled else None,
            off_cpu_max_ms=max(w.off_cpu_max_ns for w in workers) / 1e6 if polled else None,
            off_cpu_windows=[(w.worker, a, b) for w in workers for a, b in w.off_cpu_windows],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "workers": self.workers,
            "loop_cpu_mean": self.loop_cpu_mean,
            "loop_cpu_max": self.loop_cpu_max,
            "spin_share_mean": self.spin_share_mean,
            "saturated_workers": self.saturated_workers,
            "saturated": self.saturated,
            "loop_lag_ms": None if self.loop_lag_ms is None else self.loop_lag_ms.to_dict(),
            "rss_max_mb": self.rss_max_mb,
            "rss_total_mb": self.rss_total_mb,
            "machine_busy_mean": self.machine_busy_mean,
            "lagging_cpu_mean": self.lagging_cpu_mean,
            "lagging_machine_busy_mean": self.lagging_machine_busy_mean,
            "gc_pauses": self.gc_pauses,
            "gc_pause_max_ms": self.gc_pause_max_ms,
            "off_cpu_share": self.off_cpu_share,
            "off_cpu_max_ms": self.off_cpu_max_ms,
            "off_cpu_windows": [list(w) for w in self.off_cpu_windows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientHealth:
        """Inverse of :meth:`to_dict`."""
        lag = data.get("loop_lag_ms")
        return cls(
            workers=int(data["workers"]),
            loop_cpu_mean=data.get("loop_cpu_mean"),
            loop_cpu_max=data.get("loop_cpu_max"),
            spin_share_mean=data.get("spin_share_mean"),
            saturated_workers=int(data.get("saturated_workers", 0)),
            loop_lag_ms=None if lag is None else Dist.from_dict(lag),
            rss_max_mb=data.get("rss_max_mb"),
            rss_total_mb=data.get("rss_total_mb"),
            machine_busy_mean=data.get("machine_busy_mean"),
            lagging_cpu_mean=data.get("lagging_cpu_mean"),
            lagging_machine_busy_mean=data.get("lagging_machine_busy_mean"),
            gc_pauses=int(data.get("gc_pauses", 0)),
            gc_pause_max_ms=data.get("gc_pause_max_ms"),
            off_cpu_share=data.get("off_cpu_share"),
            off_cpu_max_ms=data.get("off_cpu_max_ms"),
            off_cpu_windows=[(int(w), int(a), int(b)) for w, a, b in data.get("off_cpu_windows", [])],
        )


def _lagging_samples(workers: list[WorkerHealth]) -> tuple[list[float], list[float]]:
    """Loop CPU and machine busy share in the samples whose loop lag exceeded :data:`LAGGING_MS`: what the loop and
    the machine were doing when the loop fell behind (a step's means would dilute a burst in a long idle drain)."""
    cpu: list[float] = []
    busy: list[float] = []
    for w in workers:
        lagging = [i for i, lag in enumerate(w.loop_lag_ms) if lag > LAGGING_MS]
        if len(w.loop_cpu) == len(w.loop_lag_ms):
            cpu.extend(w.loop_cpu[i] for i in lagging)
        if len(w.machine_busy) == len(w.loop_lag_ms):
            busy.extend(w.machine_busy[i] for i in lagging)
    return cpu, busy
