"""Scrape a server's Prometheus ``/metrics`` around an experiment: before it, periodically while it runs, after it.

The scraper does no I/O of its own: the caller injects ``fetch(url) -> (status, body_bytes)`` (the probe passes the
measuring client's ``get``), because ``signals`` must not import ``wire`` (DESIGN.md, "Layers"). What comes back is
parsed with :func:`~latscope.signals.prometheus.parse_exposition` and summarised with
:func:`~latscope.signals.engines.window_stats`: counters and histograms from the before/after delta, gauges from
every snapshot of the window.

A metrics endpoint that is missing, refuses, answers something other than Prometheus text, or fails mid-way is never
an error for the experiment: the result is a :class:`NotAvailable` that says why, and the experiment goes on.

Usage::

    async with MetricsScraper(fetch, metrics_url_for(base_url), interval_s=1.0) as scraper:
        ...  # the experiment
    window = scraper.result  # MetricsWindow, or NotAvailable with .why
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit

from latscope.signals.engines import window_stats
from latscope.signals.prometheus import Snapshot, parse_exposition
from latscope.signals.windowstats import ServerWindowStats

Fetch = Callable[[str], Awaitable[tuple[int, bytes]]]
"""``fetch(url) -> (HTTP status, whole body)``. It may raise any exception when no answer came: the scrape then
reports :class:`NotAvailable` with the exception's message."""

Clock = Callable[[], float]
"""A clock in seconds (default :func:`time.monotonic`); it stamps each snapshot's ``taken_at_s``."""

#: Time between the periodic scrapes while an experiment runs, s. Prometheus itself scrapes every 15-60 s; one
#: second resolves the queue building up under a load step while costing the server one small GET per second.
DEFAULT_INTERVAL_S = 1.0
#: The shortest interval accepted, s: a ``/metrics`` render takes milliseconds of the server's CPU (vLLM's
#: exposition is tens of kilobytes), so scraping faster would load the server being measured.
MIN_INTERVAL_S = 0.05
#: Periodic scrapes kept at most (an hour at the default interval): bounds memory for a long bench; later
#: scrapes are skipped with a warning, and the before/after delta is unaffected.
DEFAULT_MAX_DURING = 3600

#: Leading characters that show an answer is HTML or JSON (an API's 200 "not found" page, a health object), not
#: exposition text, which starts with ``#`` or a metric name.
_NOT_EXPOSITION_STARTS = ("<", "{", "[")


def metrics_url_for(base_url: str) -> str:
    """The default metrics URL of a target: its origin + ``/metrics`` (``http://h:8000/v1`` → ``http://h:8000/metrics``),
    where vLLM, SGLang, TGI, llama.cpp and the lab serve it. Raises ValueError for a URL without scheme and host."""
    parts = urlsplit(base_url)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"not an absolute URL: {base_url!r}")
    return f"{parts.scheme}://{parts.netloc}/metrics"


@dataclass(frozen=True, slots=True)
class NotAvailable:
    """No server metrics for this experiment, and why (``"it answered HTTP 404"``, ``"TCP connect … refused"``)."""

    url: str  #: the metrics URL that was tried
    why: str

    def __str__(self) -> str:
        return f"no server metrics from {self.url}: {self.why}"


@dataclass(frozen=True, slots=True)
class MetricsWindow:
    """The scrapes around one experiment and what they say.

    ``before`` and ``after`` bound the window; ``during`` are the periodic scrapes in order (gauges: queue length,
    running requests, KV usage). ``stats`` is None when no adapter knows these metrics (``family`` then says
    ``None`` and ``warnings`` why). ``missed`` counts periodic scrapes that failed (non-fatal: the delta needs only
    before and after). Snapshot times are the scraper's clock, in seconds.
    """

    url: str
    before: Snapshot
    after: Snapshot
    during: tuple[Snapshot, ...] = ()
    stats: ServerWindowStats | None = None
    missed: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def interval_s(self) -> float | None:
        """Seconds between the before and the after scrape."""
        if self.before.taken_at_s is None or self.after.taken_at_s is None:
            return None
        return self.after.taken_at_s - self.before.taken_at_s

    @property
    def family(self) -> str | None:
        """The server family the metrics were read as ("vllm", "lab" …), or None."""
        return None if self.stats is None else self.stats.family


def _describe(exc: BaseException) -> str:
    message = str(exc).strip()
    return message if message else type(exc).__name__


async def fetch_exposition(
    fetch: Fetch, url: str, *, clock: Clock = time.monotonic
) -> tuple[float, str] | NotAvailable:
    """Fetch ``url`` once: ``(clock() when the answer arrived, its text)``, or :class:`NotAvailable` when the fetch
    raised, the status is not 200, or the body is plainly not Prometheus text. Nothing is parsed yet
    (:func:`parse_scrape`): a large exposition (vLLM's is ~50 KB) takes milliseconds of the client's CPU to parse,
    which the periodic scrapes keep out of the window they measure."""
    try:
        status, body = await fetch(url)
    except Exception as exc:  # any failure of the injected fetch means "no metrics here", never a failed experiment
        return NotAvailable(url, f"the scrape failed: {_describe(exc)}")
    taken_at_s = clock()
    if status != 200:
        return NotAvailable(url, f"it answered HTTP {status}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return NotAvailable(url, "the answer is not UTF-8 text, so not Prometheus text")
    stripped = text.lstrip()
    if not stripped:
        return NotAvailable(url, "the answer is empty")
    if stripped.startswith(_NOT_EXPOSITION_STARTS):
        return NotAvailable(url, f"the answer is not Prometheus text (it starts with {stripped[:40]!r})")
    return taken_at_s, text


def parse_scrape(url: str, taken_at_s: float, text: str, warnings: list[str] | None = None) -> Snapshot | NotAvailable:
    """The :class:`Snapshot` of a fetched exposition (:func:`fetch_exposition`), or :class:`NotAvailable` when it
    holds no metrics. Parse warnings (malformed lines dropped) go to ``warnings``."""
    parse_warnings: list[str] = []
    snapshot = parse_exposition(text, taken_at_s=taken_at_s, warnings=parse_warnings)
    if not snapshot.families:
        return NotAvailable(url, f"the answer holds no Prometheus metrics (it starts with {text.lstrip()[:40]!r})")
    if warnings is not None:
        warnings.extend(parse_warnings)
    return snapshot


async def scrape_once(
    fetch: Fetch,
    url: str,
    *,
    clock: Clock = time.monotonic,
    warnings: list[str] | None = None,
) -> Snapshot | NotAvailable:
    """Fetch ``url`` once and parse it: a :class:`Snapshot` stamped with ``clock()`` when the answer arrived, or
    :class:`NotAvailable` when the fetch raised, the status is not 200, or the body is not Prometheus text.
    Parse warnings (malformed lines dropped) go to ``warnings``."""
    fetched = await fetch_exposition(fetch, url, clock=clock)
    if isinstance(fetched, NotAvailable):
        return fetched
    return parse_scrape(url, *fetched, warnings)


class MetricsScraper:
    """Scrapes ``url`` before an experiment, every ``interval_s`` while it runs, and after it.

    ``interval_s`` None takes no periodic scrapes (before and after only: what a probe of a few sequential requests
    needs, without a concurrent GET disturbing them). At most ``max_during`` periodic scrapes are kept; they are at
    least ``interval_s`` apart (the next waits for the previous to answer). The periodic scrapes are parsed when the
    window ends: parsing them as they come (vLLM's ~50 KB exposition takes the client's loop for milliseconds) would
    take the client's CPU from the very reads it stamps. ``family`` forces an adapter ("vllm",
    "lab" …) instead of detecting it from the metric names.

    :meth:`start` takes the ``before`` scrape and starts the periodic ones; :meth:`stop` ends them, takes the
    ``after`` scrape and returns the :class:`MetricsWindow` (also kept in :attr:`result`) or :class:`NotAvailable`.
    As an async context manager, a block that raises skips the ``after`` scrape (result: NotAvailable).
    """

    def __init__(
        self,
        fetch: Fetch,
        url: str,
        *,
        interval_s: float | None = DEFAULT_INTERVAL_S,
        max_during: int = DEFAULT_MAX_DURING,
        family: str | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if interval_s is not None and not interval_s >= MIN_INTERVAL_S:  # `not >=` also rejects NaN
            raise ValueError(f"interval_s must be at least {MIN_INTERVAL_S} s (or None), got {interval_s!r}")
        if max_during < 0:
            raise ValueError(f"max_during must be >= 0, got {max_during!r}")
        self.fetch = fetch
        self.url = url
        self.interval_s = interval_s
        self.max_during = max_during
        self.family = family
        self.clock = clock
        self.result: MetricsWindow | NotAvailable | None = None  #: set by :meth:`stop`
        self._before: Snapshot | NotAvailable | None = None
        self._during: list[tuple[float, str]] = []  # the periodic scrapes' (taken_at_s, text), parsed at stop
        self._missed = 0
        self._warnings: list[str] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool | None:
        """None before :meth:`start`; then whether the ``before`` scrape got metrics."""
        return None if self._before is None else isinstance(self._before, Snapshot)

    async def start(self) -> NotAvailable | None:
        """Take the ``before`` scrape; start the periodic scrapes when it worked. Returns the NotAvailable, if any."""
        if self._before is not None:
            raise RuntimeError("the scraper was already started")
        self._before = await scrape_once(self.fetch, self.url, clock=self.clock, warnings=self._warnings)
        if isinstance(self._before, NotAvailable):
            return self._before
        if self.interval_s is not None and self.max_during > 0:
            self._task = asyncio.create_task(self._periodic(self.interval_s), name=f"scrape {self.url}")
        return None

    async def stop(self, *, scrape_after: bool = True) -> MetricsWindow | NotAvailable:
        """End the periodic scrapes, take the ``after`` scrape (unless ``scrape_after`` is False) and compute the
        window. Calling it again returns the same result."""
        if self.result is not None:
            return self.result
        await self._cancel_periodic()
        before = self._before
        if before is None:
            raise RuntimeError("the scraper was never started")
        if isinstance(before, NotAvailable):
            self.result = before
            return before
        if not scrape_after:
            self.result = NotAvailable(self.url, "the experiment failed, so no scrape was taken after it")
            return self.result
        after = await scrape_once(self.fetch, self.url, clock=self.clock, warnings=self._warnings)
        if isinstance(after, NotAvailable):
            self.result = NotAvailable(self.url, f"the scrape after the experiment failed: {after.why}")
            return self.result
        warnings = self._warnings
        during: list[Snapshot] = []
        for taken_at_s, text in self._during:
            parsed = parse_scrape(self.url, taken_at_s, text, warnings)
            if isinstance(parsed, Snapshot):
                during.append(parsed)
            else:
                self._missed += 1
        stats = window_stats(before, after, during=during, family=self.family, warnings=warnings)
        if self._missed:
            warnings.append(f"{self._missed} periodic scrape(s) of {self.url} failed; gauges come from the others")
        self.result = MetricsWindow(
            url=self.url,
            before=before,
            after=after,
            during=tuple(during),
            stats=stats,
            missed=self._missed,
            warnings=tuple(warnings),
        )
        return self.result

    async def _periodic(self, interval_s: float) -> None:
        for _ in range(self.max_during):
            await asyncio.sleep(interval_s)
            fetched = await fetch_exposition(self.fetch, self.url, clock=self.clock)
            if isinstance(fetched, NotAvailable):
                self._missed += 1
            else:
                self._during.append(fetched)
        self._warnings.append(f"periodic scrapes stopped after {self.max_during}; the before/after delta still holds")

    async def _cancel_periodic(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # asyncio.wait, not `await task`: the task's own CancelledError is expected here, while a cancellation of
        # the caller must still propagate
        await asyncio.wait([task])
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error  # a bug in the periodic loop must not pass silently

    async def __aenter__(self) -> MetricsScraper:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop(scrape_after=exc_type is None)


__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_DURING",
    "MIN_INTERVAL_S",
    "Clock",
    "Fetch",
    "MetricsScraper",
    "MetricsWindow",
    "NotAvailable",
    "fetch_exposition",
    "metrics_url_for",
    "parse_scrape",
    "scrape_once",
]
