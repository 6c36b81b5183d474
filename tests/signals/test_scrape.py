"""The Prometheus scraper with an injected fetch: before/after/periodic scrapes, and clear NotAvailable results."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from latscope.signals.prometheus import Snapshot
from latscope.signals.scrape import (
    MIN_INTERVAL_S,
    MetricsScraper,
    MetricsWindow,
    NotAvailable,
    metrics_url_for,
    scrape_once,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"
VLLM_BEFORE = (FIXTURES / "vllm.before.prom").read_bytes()
VLLM_AFTER = (FIXTURES / "vllm.after.prom").read_bytes()
URL = "http://127.0.0.1:8000/metrics"

Answer = tuple[int, bytes] | Exception


class FakeFetch:
    """Answers each call with the next scripted answer (the last one repeats); records the URLs asked for."""

    def __init__(self, *answers: Answer, notify_after: int | None = None) -> None:
        self.answers = list(answers)
        self.urls: list[str] = []
        self.notify_after = notify_after
        self.reached = asyncio.Event()

    async def __call__(self, url: str) -> tuple[int, bytes]:
        self.urls.append(url)
        if self.notify_after is not None and len(self.urls) >= self.notify_after:
            self.reached.set()
        answer = self.answers[min(len(self.urls), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def _ticks(start: float = 100.0, step: float = 10.0) -> Iterator[float]:
    value = start
    while True:
        yield value
        value += step


def _clock(start: float = 100.0, step: float = 10.0) -> Callable[[], float]:
    ticks = _ticks(start, step)
    return lambda: next(ticks)


def test_the_default_metrics_url_is_the_origin_plus_metrics() -> None:
    assert metrics_url_for("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url_for("https://gpu-box/openai/v1/") == "https://gpu-box/metrics"
    with pytest.raises(ValueError, match="not an absolute URL"):
        metrics_url_for("gpu-box:8000")


async def test_a_prometheus_answer_is_a_snapshot_stamped_when_it_arrived() -> None:
    snapshot = await scrape_once(FakeFetch((200, VLLM_AFTER)), URL, clock=lambda: 42.5)
    assert isinstance(snapshot, Snapshot)
    assert snapshot.taken_at_s == 42.5 and snapshot.has_prefix("vllm:")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((404, b"not found"), "it answered HTTP 404"),
        ((200, b"<html><body>Welcome</body></html>"), "not Prometheus text (it starts with '<html>"),
        ((200, b'{"status": "ok"}'), "not Prometheus text"),
        ((200, b"\xff\xfe\x00garbage"), "not UTF-8"),
        ((200, b"  \n"), "the answer is empty"),
        ((200, b"data: [DONE]\n"), "holds no Prometheus metrics"),
        (ConnectionRefusedError("TCP connect to 127.0.0.1:8000 failed: connection refused"), "connection refused"),
    ],
)
async def test_no_metrics_is_a_clear_non_fatal_result(answer: Answer, why: str) -> None:
    result = await scrape_once(FakeFetch(answer), URL)
    assert isinstance(result, NotAvailable)
    assert result.url == URL and why in result.why
    assert str(result).startswith(f"no server metrics from {URL}: ")


async def test_before_and_after_give_the_window_stats() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE), (200, VLLM_AFTER))
    scraper = MetricsScraper(fetch, URL, interval_s=None, clock=_clock())
    assert await scraper.start() is None and scraper.available is True
    window = await scraper.stop()
    assert isinstance(window, MetricsWindow) and window is scraper.result
    assert fetch.urls == [URL, URL]
    assert window.interval_s == 10.0 and window.family == "vllm" and window.during == ()
    assert window.stats is not None
    assert window.stats.requests_finished == 4.0
    assert window.stats.mean_queue_ms == pytest.approx(25.0)
    assert window.stats.mean_prefill_ms == pytest.approx(150.0)
    assert await scraper.stop() is window  # idempotent: no third scrape
    assert len(fetch.urls) == 2


async def test_periodic_scrapes_are_bounded_and_feed_the_gauges() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE), (200, VLLM_AFTER), notify_after=4)  # before + 3 periodic
    async with MetricsScraper(fetch, URL, interval_s=MIN_INTERVAL_S, max_during=3) as scraper:
        await asyncio.wait_for(fetch.reached.wait(), timeout=10)
        await asyncio.sleep(3 * MIN_INTERVAL_S)  # past where a fourth periodic scrape would be, were it unbounded
    window = scraper.result
    assert isinstance(window, MetricsWindow)
    assert len(window.during) == 3 and len(fetch.urls) == 5  # before, 3 periodic, after
    assert window.stats is not None and window.stats.waiting is not None
    assert window.stats.waiting.samples == 5  # before, during and after all count for gauges
    assert window.stats.waiting.max == 1.0
    assert any("periodic scrapes stopped after 3" in w for w in window.warnings)


async def test_a_failed_periodic_scrape_is_counted_not_fatal() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE), OSError("reset"), (200, VLLM_AFTER), notify_after=2)
    async with MetricsScraper(fetch, URL, interval_s=MIN_INTERVAL_S, max_during=1) as scraper:
        await asyncio.wait_for(fetch.reached.wait(), timeout=10)
        await asyncio.sleep(0)  # let the periodic task record the failure
    window = scraper.result
    assert isinstance(window, MetricsWindow)
    assert window.missed == 1 and window.during == ()
    assert window.stats is not None and window.stats.requests_finished == 4.0
    assert any("1 periodic scrape(s)" in w for w in window.warnings)


async def test_a_failed_before_scrape_skips_the_rest() -> None:
    fetch = FakeFetch((404, b""))
    async with MetricsScraper(fetch, URL, interval_s=MIN_INTERVAL_S) as scraper:
        assert scraper.available is False
    assert isinstance(scraper.result, NotAvailable) and scraper.result.why == "it answered HTTP 404"
    assert fetch.urls == [URL]


async def test_a_failed_after_scrape_says_so() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE), (503, b"overloaded"))
    scraper = MetricsScraper(fetch, URL, interval_s=None)
    await scraper.start()
    result = await scraper.stop()
    assert isinstance(result, NotAvailable)
    assert result.why == "the scrape after the experiment failed: it answered HTTP 503"


async def test_an_experiment_that_raises_takes_no_after_scrape() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE), (200, VLLM_AFTER))
    scraper = MetricsScraper(fetch, URL, interval_s=None)
    with pytest.raises(RuntimeError, match="boom"):
        async with scraper:
            raise RuntimeError("boom")
    assert isinstance(scraper.result, NotAvailable) and "experiment failed" in scraper.result.why
    assert fetch.urls == [URL]


async def test_metrics_no_adapter_knows_still_give_a_window() -> None:
    text = b"# TYPE myapp_requests_total counter\nmyapp_requests_total 3\n"
    fetch = FakeFetch((200, text))
    async with MetricsScraper(fetch, URL, interval_s=None) as scraper:
        pass
    window = scraper.result
    assert isinstance(window, MetricsWindow)
    assert window.stats is None and window.family is None
    assert any("no adapter" in w for w in window.warnings)


def test_the_interval_and_count_are_bounded() -> None:
    fetch = FakeFetch((200, VLLM_BEFORE))
    with pytest.raises(ValueError, match="interval_s"):
        MetricsScraper(fetch, URL, interval_s=MIN_INTERVAL_S / 2)
    with pytest.raises(ValueError, match="interval_s"):
        MetricsScraper(fetch, URL, interval_s=float("nan"))
    with pytest.raises(ValueError, match="max_during"):
        MetricsScraper(fetch, URL, max_during=-1)


async def test_periodic_scrapes_are_parsed_when_the_window_ends_not_while_it_is_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Parsing vLLM's ~50 KB exposition takes milliseconds of the client's loop: during an experiment that would delay
    the very reads it stamps (whole streams arrived in one read), so the periodic scrapes keep their text until
    stop."""
    import latscope.signals.scrape as scrape

    parsed: list[float | None] = []
    real = scrape.parse_exposition

    def counting(text: str, *, taken_at_s: float | None = None, warnings: list[str] | None = None) -> Snapshot:
        parsed.append(taken_at_s)
        return real(text, taken_at_s=taken_at_s, warnings=warnings)

    monkeypatch.setattr(scrape, "parse_exposition", counting)
    fetch = FakeFetch((200, VLLM_BEFORE), (200, VLLM_AFTER), notify_after=4)  # before + 3 periodic
    async with MetricsScraper(fetch, URL, interval_s=MIN_INTERVAL_S, max_during=3) as scraper:
        await asyncio.wait_for(fetch.reached.wait(), timeout=10)
        await asyncio.sleep(0)
        assert len(parsed) == 1  # the before scrape only, though three periodic ones arrived
    window = scraper.result
    assert isinstance(window, MetricsWindow) and len(window.during) == 3
    assert len(parsed) == 5  # before, the three periodic ones, after
