"""Keeping CPython's cyclic garbage collector out of timed work: off while timing matters, run when it does not.

The collector runs when enough container objects have been allocated and not yet freed, and a run scans every such
object while the thread waits. A process that holds many of them for good reasons — a load generator's requests in
flight and a batch of timelines for the Parquet writer, the lab's streams and request records — stalls for
milliseconds at a time, tens of them under load. Reference counting frees everything that is not in a cycle, and
latscope's own requests make no cycles (tests/wire/test_no_cycles.py), so :class:`QuietCollector` switches the
automatic collector off and collects:

* when told (:meth:`QuietCollector.collect`: the lab does it when idle, the client between steps);
* as a guard (:meth:`QuietCollector.check`), when resident memory grew by :data:`GUARD_GROWTH_BYTES` since the start
  or the last collection — libraries make cycles of their own (h2 one per HTTP/2 connection) — and then the pause is
  returned so the caller can report it. Without ``/proc`` the collector's own allocation count stands in.
"""

from __future__ import annotations

import gc
import os
import time

#: Resident-memory growth (bytes) since the start or the last collection that makes the guard collect: far above
#: what latscope holds legitimately (a writer batch is ~10 MB, 10,000 streams in flight a few hundred MB).
GUARD_GROWTH_BYTES = 1 << 30

#: Without a resident-memory reading: young container objects (the collector's generation-0 count) that trigger it.
GUARD_OBJECTS = 4_000_000


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int | None:
    """Resident memory of this process in bytes (Linux ``/proc/self/statm``: one short line, cheap to read even in a
    busy process), None elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class QuietCollector:
    """:meth:`enter` (a full collection, tens of ms, then what survives is frozen: never scanned again, and the
    automatic collector is off), :meth:`check` or :meth:`collect` now and then, :meth:`exit` to restore."""

    def __init__(self, growth_bytes: int = GUARD_GROWTH_BYTES, objects: int = GUARD_OBJECTS) -> None:
        self.growth_bytes = growth_bytes
        self.objects = objects
        self.pauses_ms: list[float] = []  #: durations of the collections run since :meth:`enter`, ms
        self._was_enabled: bool | None = None
        self._baseline_rss: int | None = None

    @property
    def active(self) -> bool:
        """True between :meth:`enter` and :meth:`exit`."""
        return self._was_enabled is not None

    def enter(self, rss: int | None = None) -> None:
        """Collect, freeze the survivors, switch the automatic collector off. ``rss``: resident bytes now (the
        guard's baseline; the first :meth:`check` takes it when None). Idempotent."""
        if self._was_enabled is not None:
            return
        self._was_enabled = gc.isenabled()
        gc.collect()
        gc.freeze()
        gc.disable()
        self._baseline_rss = rss
        self.pauses_ms = []

    def check(self, rss: int | None) -> float | None:
        """Collect if the guard says so; return the pause in ms, None when it did not. ``rss``: resident bytes now,
        None where unknown."""
        if self._was_enabled is None:
            return None
        if rss is not None:
            if self._baseline_rss is None:
                self._baseline_rss = rss
                return None
            if rss - self._baseline_rss < self.growth_bytes:
                return None
        elif gc.get_count()[0] < self.objects:
            return None
        return self.collect(rss)

    def collect(self, rss: int | None = None) -> float:
        """Collect now; return the pause in ms. ``rss``: resident bytes now (the guard's new baseline)."""
        start = time.perf_counter_ns()
        gc.collect()
        pause_ms = (time.perf_counter_ns() - start) / 1e6
        self.pauses_ms.append(pause_ms)
        self._baseline_rss = rss  # what survived is in use: measure further growth from here
        return pause_ms

    def exit(self) -> None:
        """Unfreeze and restore the automatic collector. Idempotent."""
        if self._was_enabled is None:
            return
        enabled, self._was_enabled = self._was_enabled, None
        gc.unfreeze()
        if enabled:
            gc.enable()
