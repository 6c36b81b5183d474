"""Interpreter settings for a measured step: no cyclic garbage collection, frequent thread switches.

Why the collector is off. CPython's cyclic collector runs when enough container objects have been allocated and not
yet freed, and a run scans every such object while the event loop waits. A load generator holds thousands of them
for good reasons — requests in flight, a batch of finished timelines waiting for the Parquet writer — so collections
stall the loop for tens of milliseconds (measured: 17–28 ms for a young generation of 50,000, 39 ms for a full one,
at 1,000 requests/s), and every read that arrives meanwhile is stamped late: a client-made latency spike. None of
it is garbage: latscope's requests, successful or failed, leave no reference cycles (tests/wire/test_no_cycles.py),
so reference counting frees them and the collector finds nothing.

What stays guarded. Libraries can make cycles of their own (h2 makes one per HTTP/2 connection), so
:meth:`StepTuning.check` — called by the health monitor at each sample — runs a collection when the process has
grown by :data:`GUARD_GROWTH_BYTES` since the step began or since the last such collection, and reports the pause
so the run can show it. Without ``/proc`` it watches the collector's own allocation count instead.
"""

from __future__ import annotations

import gc
import sys
import time

#: Resident-memory growth (bytes) since the step's start or the last guarded collection that triggers a collection.
#: Far above what a step holds legitimately (a writer batch is ~10 MB, 10,000 streams in flight a few hundred MB).
GUARD_GROWTH_BYTES = 1 << 30

#: Without a resident-memory reading: young container objects (the collector's generation-0 count) that trigger one.
GUARD_OBJECTS = 4_000_000

#: Interpreter thread switch interval during a step, s (Python's default: 0.005). The Parquet writer thread converts
#: batches while the loop runs; with the default, a read arriving while that thread holds the GIL could wait up to
#: 5 ms to be stamped. 0.5 ms bounds that wait at the cost of slightly more frequent switching.
SWITCH_INTERVAL_S = 0.0005


class StepTuning:
    """:meth:`enter` before a step starts (it runs a full collection, tens of ms, and freezes what survives so it is
    never scanned again), :meth:`exit` after it; :meth:`check` now and then while it runs."""

    def __init__(self, growth_bytes: int = GUARD_GROWTH_BYTES, objects: int = GUARD_OBJECTS) -> None:
        self.growth_bytes = growth_bytes
        self.objects = objects
        self.pauses_ms: list[float] = []  #: durations of the guarded collections run during the step, ms
        self._saved: tuple[bool, float] | None = None
        self._baseline_rss: int | None = None

    @property
    def active(self) -> bool:
        """True between :meth:`enter` and :meth:`exit`."""
        return self._saved is not None

    def enter(self, rss: int | None = None) -> None:
        """Collect, freeze the survivors, switch the collector off and threads often. ``rss``: resident bytes now
        (the guard's baseline; taken again at the first :meth:`check` when None). Idempotent."""
        if self._saved is not None:
            return
        self._saved = (gc.isenabled(), sys.getswitchinterval())
        gc.collect()
        gc.freeze()
        gc.disable()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._baseline_rss = rss
        self.pauses_ms = []

    def check(self, rss: int | None) -> float | None:
        """Collect if the guard says so (see the module docstring); return the pause in ms, None when it did not.
        ``rss``: resident bytes now, None where unknown."""
        if self._saved is None:
            return None
        if rss is not None:
            if self._baseline_rss is None:
                self._baseline_rss = rss
                return None
            if rss - self._baseline_rss < self.growth_bytes:
                return None
        elif gc.get_count()[0] < self.objects:
            return None
        start = time.perf_counter_ns()
        gc.collect()
        pause_ms = (time.perf_counter_ns() - start) / 1e6
        self.pauses_ms.append(pause_ms)
        # what survived is in use: measure further growth from here
        self._baseline_rss = rss
        return pause_ms

    def exit(self) -> None:
        """Restore the collector and the switch interval; unfreeze. Idempotent."""
        if self._saved is None:
            return
        enabled, interval = self._saved
        self._saved = None
        gc.unfreeze()
        if enabled:
            gc.enable()
        sys.setswitchinterval(interval)
