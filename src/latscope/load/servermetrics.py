"""The target's Prometheus gauges over a whole bench run: its batch size (running requests), queue and KV usage.

:class:`GaugeSampler` runs a :class:`~latscope.signals.MetricsScraper` on the target's default metrics URL
(:func:`~latscope.signals.metrics_url_for`) every ``interval_s``, in a thread with its own event loop and client, so
it runs beside worker processes and beside an in-process run alike and never shares a connection with a measured
request. A target without metrics is never an error: the result says why there is no series. The result goes into
``run.json`` (``server_gauges``) and the run report draws it (:mod:`latscope.report.batchsize`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from latscope.signals import MetricsScraper, NotAvailable, metrics_url_for
from latscope.signals.windowstats import gauge_series
from latscope.wire.target import Target

#: Time between scrapes, s: resolves the batch filling as a load step ramps, at one small GET per second.
INTERVAL_S = 1.0
#: Scrapes kept at most (a long soak at the default interval keeps two hours).
MAX_SCRAPES = 7200


class GaugeSampler:
    """Scrapes a target's metrics in the background from :meth:`start` to :meth:`stop`; :meth:`mark` notes when a
    load step began. Times are seconds since :meth:`start` (monotonic clock)."""

    def __init__(self, target: Target | str, *, interval_s: float = INTERVAL_S) -> None:
        self.target = Target.resolve(target) if isinstance(target, str) else target
        self.url = metrics_url_for(self.target.base_url)
        self.interval_s = interval_s
        self._result: dict[str, Any] = {"url": self.url, "why": "the scrape never ran"}
        self._marks: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._began = 0.0

    def start(self) -> None:
        """Begin scraping (returns at once)."""
        self._began = time.monotonic()
        self._thread = threading.Thread(target=asyncio.run, args=(self._scrape(),), name="latscope-gauges")
        self._thread.daemon = True
        self._thread.start()

    def mark(self, label: str) -> None:
        """Note that the load step ``label`` begins now."""
        self._marks.append((label, round(time.monotonic() - self._began, 3)))

    def stop(self) -> dict[str, Any]:
        """Stop scraping and return the series, ``run.json``'s ``server_gauges``: ``{"url", "family", "points":
        [[t_s, running, waiting, kv_usage], …], "steps": [[label, t_s], …]}``, or ``{"url", "why"}`` when no
        metrics came."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 15.0)
        return self._result

    async def _scrape(self) -> None:
        async with self.target.client() as client:
            scraper = MetricsScraper(client.fetch, self.url, interval_s=self.interval_s, max_during=MAX_SCRAPES)
            missing = await scraper.start()
            if missing is None:  # metrics answered: scrape until the run ends
                await asyncio.get_running_loop().run_in_executor(None, self._stop.wait)
            window = await scraper.stop()
        if isinstance(window, NotAvailable):
            self._result = {"url": self.url, "why": window.why}
        elif window.stats is None or window.stats.running is None:
            self._result = {"url": self.url, "why": "the metrics have no running-requests gauge latscope knows"}
        else:
            points = [list(row) for row in gauge_series(window.stats, self._began)]
            self._result = {
                "url": self.url,
                "family": window.stats.family,
                "points": points,
                "steps": [list(m) for m in self._marks],
            }
