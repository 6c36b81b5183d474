"""The target's Prometheus metrics around an experiment: found by themselves, never required.

:func:`scraping` wraps an experiment's requests in a :class:`~latscope.signals.MetricsScraper` on the target's
default metrics URL (its origin + ``/metrics``: vLLM, SGLang, TGI, llama.cpp's ``--metrics`` and the lab), on a
client of its own so the scrapes never share a connection with a measured request. A target without metrics gives a
:class:`~latscope.signals.NotAvailable` that says why; the experiment goes on, and its checks lose only the
confirmation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from latscope.diagnose.context import Context
from latscope.signals import MetricsScraper, MetricsWindow, NotAvailable, metrics_url_for
from latscope.signals.scrape import MIN_INTERVAL_S

#: Time between scrapes while an experiment runs, s: the scraper's shortest. A burst of short requests lasts a few
#: hundred ms, and the queue behind a fast engine's slots only tens of ms; the scrapes last seconds in all.
INTERVAL_S = MIN_INTERVAL_S
#: Periodic scrapes kept at most (bounds a slow experiment).
MAX_DURING = 600


class Scrape:
    """The result slot of :func:`scraping`: ``result`` is the window, or why there is none, once the block ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.result: MetricsWindow | NotAvailable = NotAvailable(url, "the experiment ended before the scrape")


@asynccontextmanager
async def scraping(ctx: Context, *, interval_s: float = INTERVAL_S) -> AsyncIterator[Scrape]:
    """Scrape the target's metrics before the block, every ``interval_s`` during it and after it."""
    url = metrics_url_for(ctx.base_url)
    slot = Scrape(url)
    async with ctx.client() as client:
        scraper = MetricsScraper(client.fetch, url, interval_s=interval_s, max_during=MAX_DURING)
        await scraper.start()
        try:
            yield slot
        except BaseException:
            await scraper.stop(scrape_after=False)
            raise
        slot.result = await scraper.stop()
