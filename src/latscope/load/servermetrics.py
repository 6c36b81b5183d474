"""The target's Prometheus gauges over a whole bench run: its batch size (running requests), queue and KV usage.

:class:`GaugeSampler` scrapes the target's default metrics URL (:func:`~latscope.signals.metrics_url_for`) every
``interval_s`` from a thread of its own with its own event loop and client, so it runs beside worker processes and
beside an in-process run alike, and never shares a connection with a measured request. A target without metrics is
never an error: the result says why there is no series. The result goes into ``run.json`` (``server_gauges``) and
the run report draws it (:mod:`latscope.report.batchsize`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

from latscope.signals import metrics_url_for
from latscope.signals.engines import detect_family, window_stats
from latscope.signals.prometheus import Snapshot
from latscope.signals.scrape import NotAvailable, scrape_once
from latscope.wire import Client

#: Time between scrapes, s: resolves the batch filling as a load step ramps, at one small GET per second.
INTERVAL_S = 1.0
#: Scrapes kept at most (a long soak at the default interval keeps two hours).
MAX_SCRAPES = 7200


class GaugeSampler:
    """Scrapes a target's metrics in the background from :meth:`start` to :meth:`stop`; :meth:`mark` notes when a
    load step began. Times are seconds since :meth:`start` (monotonic clock)."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        verify: bool = True,
        ca_file: str | None = None,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.url = metrics_url_for(base_url)
        self.headers = tuple(headers)
        self.verify = verify
        self.ca_file = ca_file
        self.interval_s = interval_s
        self._snapshots: list[Snapshot] = []
        self._why: str | None = None
        self._marks: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._began = 0.0

    def start(self) -> None:
        """Begin scraping (returns at once)."""
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="latscope-gauges", daemon=True)
        self._thread.start()

    def mark(self, label: str) -> None:
        """Note that the load step ``label`` begins now."""
        self._marks.append((label, round(time.monotonic() - self._began, 3)))

    def stop(self) -> dict[str, Any]:
        """Stop scraping and return the series (``run.json``'s ``server_gauges``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 15.0)
        return self.result()

    def result(self) -> dict[str, Any]:
        """``{"url", "family", "points": [[t_s, running, waiting, kv_usage], …], "steps": [[label, t_s], …]}``, or
        ``{"url", "why"}`` when no metrics came."""
        snapshots = list(self._snapshots)
        if len(snapshots) < 2:
            return {"url": self.url, "why": self._why or "fewer than two scrapes answered"}
        family = detect_family(snapshots[-1])
        stats = None if family is None else window_stats(snapshots[0], snapshots[-1], during=snapshots[1:-1])
        if stats is None or stats.running is None:
            return {"url": self.url, "why": "the metrics have no running-requests gauge latscope knows"}
        waiting = {} if stats.waiting is None else dict(stats.waiting.points)
        kv = {} if stats.kv_usage is None else dict(stats.kv_usage.points)
        points = [
            [round(at - self._began, 3), running, waiting.get(at), kv.get(at)] for at, running in stats.running.points
        ]
        return {"url": self.url, "family": stats.family, "points": points, "steps": [list(m) for m in self._marks]}

    def _run(self) -> None:
        asyncio.run(self._scrape())

    async def _scrape(self) -> None:
        async with Client(headers=list(self.headers), verify=self.verify, ca_file=self.ca_file) as client:

            async def fetch(url: str) -> tuple[int, bytes]:
                response = await client.get(url)
                return response.status, response.body

            while not self._stop.is_set() and len(self._snapshots) < MAX_SCRAPES:
                scraped = await scrape_once(fetch, self.url)
                if isinstance(scraped, NotAvailable):
                    self._why = scraped.why
                    if not self._snapshots:
                        return  # no metrics here: stop asking
                else:
                    self._snapshots.append(scraped)
                await asyncio.get_running_loop().run_in_executor(None, self._stop.wait, self.interval_s)
