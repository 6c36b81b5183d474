"""Interpreter settings for a measured step: the cyclic collector kept quiet, frequent thread switches.

See :mod:`latscope.quietgc` for why the collector is off during a step and what guards memory meanwhile; the health
monitor runs :meth:`StepTuning.check` at each sample and reports its pauses.
"""

from __future__ import annotations

import sys

from latscope.quietgc import GUARD_GROWTH_BYTES, GUARD_OBJECTS, QuietCollector

#: Interpreter thread switch interval during a step, s (Python's default: 0.005). The Parquet writer thread converts
#: batches while the loop runs; with the default, a read arriving while that thread holds the GIL could wait up to
#: 5 ms to be stamped. 0.5 ms bounds that wait at the cost of slightly more frequent switching.
SWITCH_INTERVAL_S = 0.0005


class StepTuning(QuietCollector):
    """:meth:`enter` before a step starts, :meth:`exit` after it; :meth:`check` now and then while it runs."""

    def __init__(self, growth_bytes: int = GUARD_GROWTH_BYTES, objects: int = GUARD_OBJECTS) -> None:
        super().__init__(growth_bytes, objects)
        self._interval: float | None = None

    def enter(self, rss: int | None = None) -> None:
        """Quiet the collector (see :class:`~latscope.quietgc.QuietCollector`) and switch threads often."""
        if self.active:
            return
        super().enter(rss)
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    def exit(self) -> None:
        """Restore the collector and the switch interval. Idempotent."""
        if not self.active:
            return
        super().exit()
        if self._interval is not None:
            sys.setswitchinterval(self._interval)
            self._interval = None
