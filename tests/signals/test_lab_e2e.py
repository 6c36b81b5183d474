"""End to end against the lab, whose records are the ground truth: per-request server signals on the timeline,
Prometheus window means, and the probe's TTFT split (API and CLI)."""

from __future__ import annotations

import asyncio
import re
import statistics
import threading
from collections.abc import Iterator, Sequence

import orjson
import pytest
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.dialects import openai
from latscope.dialects.prompts import synthetic_prompt
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.records import RequestRecord
from latscope.probe import TtftSides, probe
from latscope.signals.join import join_server_signals
from latscope.signals.scrape import MetricsScraper, MetricsWindow
from latscope.timeline.model import Timeline
from latscope.wire import Client

#: prefill clearly measurable (0.2 ms/token: ~32 ms for a 150-token prompt), decode steps short so the tests are
#: quick, and two sequences at a time so concurrent requests wait in the queue
COST = CostModel.default().with_overrides(
    prefill_per_token_ms=0.2, decode_base_ms=2.0, decode_per_seq_ms=0.1, max_batch=2
)
PROMPT_TOKENS = 150
MAX_TOKENS = 4

#: the lab's Server-Timing and body fields are rounded to the microsecond; 1 ms is the brief's agreement bound
AGREEMENT_MS = 1.0
#: Prometheus means vs the records' means, relative
AGREEMENT_RATIO = 0.05


def _generation_records(lab: Lab) -> dict[str, RequestRecord]:
    return {r.request_id: r for r in lab.records if r.endpoint is not None and r.request_id is not None}


async def _send_concurrently(lab: Lab, client: Client, count: int) -> list[Timeline]:
    spec = openai.chat_request(lab.settings.model, synthetic_prompt(PROMPT_TOKENS, seed=0), MAX_TOKENS)
    return list(await asyncio.gather(*(client.request(spec, lab.url) for _ in range(count))))


def _measure(t: Timeline, source: str) -> float:
    found = [m.ms for m in t.server if m.source == source]
    assert len(found) == 1, (source, t.server)
    return found[0]


async def test_server_timing_and_final_chunk_timings_agree_with_the_lab_records() -> None:
    async with Lab(cost=COST) as lab, Client() as client:
        timelines = await _send_concurrently(lab, client, 4)
        records = _generation_records(lab)
    assert all(t.ok for t in timelines)
    queued = 0
    for t in timelines:
        join_server_signals(t)
        record = records[t.response_headers["x-request-id"]]
        assert record.parse_ms is not None and record.validate_ms is not None
        assert record.queue_ms is not None and record.prefill_ms is not None and record.decode_ms is not None
        truth = {
            "header:server-timing:parse": record.parse_ms,
            "header:server-timing:validate": record.validate_ms,
            "header:server-timing:queue": record.queue_ms,
            "header:server-timing:prefill": record.prefill_ms,
            "body:timings.prompt_ms": record.prefill_ms,
            "body:timings.predicted_ms": record.decode_ms,
            "body:latscope.queue_ms": record.queue_ms,
            "body:latscope.prefill_ms": record.prefill_ms,
            "body:latscope.decode_ms": record.decode_ms,
        }
        for source, expected in truth.items():
            assert _measure(t, source) == pytest.approx(expected, abs=AGREEMENT_MS), source
        assert t.server_ms("prefill") == pytest.approx(record.prefill_ms, abs=AGREEMENT_MS)
        queued += record.queue_ms > record.prefill_ms / 2  # waited for a slot behind another request
    assert queued >= 1  # 4 concurrent requests, 2 slots: the join was tested with non-zero queueing


async def test_vllm_metrics_means_agree_with_the_lab_records_over_a_load() -> None:
    waves, per_wave = 5, 6
    async with Lab(cost=COST, metrics_names="vllm") as lab, Client() as client, Client() as metrics_client:

        async def fetch(url: str) -> tuple[int, bytes]:
            response = await metrics_client.get(url)
            return response.status, response.body

        # requests before the window: its delta must leave them out (their queue is ~0, so lifetime totals would
        # pull the mean queue well outside the tolerance)
        warm_up = [t for _ in range(4) for t in await _send_concurrently(lab, client, 1)]
        async with MetricsScraper(fetch, lab.origin + "/metrics", interval_s=0.1) as scraper:
            timelines: list[Timeline] = []
            for _ in range(waves):
                timelines += await _send_concurrently(lab, client, per_wave)
        before_window = {t.response_headers["x-request-id"] for t in warm_up}
        records = [r for r in _generation_records(lab).values() if r.request_id not in before_window]
    window = scraper.result
    assert isinstance(window, MetricsWindow), window
    assert all(t.ok for t in timelines) and len(records) == waves * per_wave
    stats = window.stats
    assert stats is not None and stats.family == "vllm"
    assert stats.requests_finished == waves * per_wave
    truth_queue = statistics.fmean(r.queue_ms or 0.0 for r in records)
    truth_prefill = statistics.fmean(r.prefill_ms or 0.0 for r in records)
    assert truth_queue > 0.5 * truth_prefill  # a real queue formed: 6 concurrent requests for 2 slots
    assert stats.mean_queue_ms == pytest.approx(truth_queue, rel=AGREEMENT_RATIO)
    assert stats.mean_prefill_ms == pytest.approx(truth_prefill, rel=AGREEMENT_RATIO)
    assert stats.waiting is not None and stats.waiting.samples == len(window.during) + 2
    assert stats.sources["mean_queue_ms"] == "vllm:request_queue_time_seconds"


async def test_probe_splits_ttft_into_client_and_server_sides_that_add_up() -> None:
    async with Lab(cost=COST) as lab:
        result = await probe(lab.url, n=3, prompt_tokens=PROMPT_TOKENS, max_tokens=MAX_TOKENS)
        records = _generation_records(lab)
    assert result.ok
    sides_list = result.ttft_sides()
    for t, sides in zip(result.timelines, sides_list, strict=True):
        assert isinstance(sides, TtftSides)
        assert t.first_token_ns is not None and t.send_end_ns is not None
        assert sides.ttft_ns == t.first_token_ns - t.started_ns
        assert sides.client_ns + sides.server_ns + sides.unattributed_ns == sides.ttft_ns
        assert sides.client_ns == t.send_end_ns - t.started_ns  # connection + send, from the client's marks
        record = records[t.response_headers["x-request-id"]]
        reported = [record.parse_ms, record.validate_ms, record.queue_ms, record.prefill_ms]
        assert all(value is not None for value in reported)
        assert sides.server_ms == pytest.approx(sum(v for v in reported if v is not None), abs=AGREEMENT_MS)
        assert sides.server_ms > sides.client_ms and sides.server_ms > 0.5 * sides.ttft_ms  # prefill dominates
    window = result.server_metrics
    assert isinstance(window, MetricsWindow) and window.family == "lab"
    assert window.stats is not None and window.stats.requests_finished == 3
    data = orjson.loads(orjson.dumps(result.to_dict()))  # what --json writes
    for request, sides in zip(data["requests"], sides_list, strict=True):
        split = request["ttft_split"]
        assert sides is not None and split["ttft_ms"] == pytest.approx(sides.ttft_ms)
        assert sum(part["ms"] for part in split["parts"]) == pytest.approx(split["ttft_ms"])
        assert {part["side"] for part in split["parts"]} == {"client", "server", "unattributed"}
    assert data["server_metrics"]["available"] is True and data["server_metrics"]["family"] == "lab"


class _LabThread:
    """The lab on its own event loop in a background thread, for the CLI (which runs its own loop)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> Lab:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.lab.start(), self._loop).result(timeout=30)
        return self.lab

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.lab.stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


HEADLINE = re.compile(
    r"TTFT split (?P<ttft>[\d.]+) ms = client-side (?P<client>[\d.]+) ms \+ server-side (?P<server>[\d.]+) ms"
    r" \+ network \+ unreported (?P<rest>-?[\d.]+) ms"
)


def _headlines(text: str) -> Iterator[dict[str, float]]:
    for match in HEADLINE.finditer(text):
        yield {name: float(value) for name, value in match.groupdict().items()}


def _ttft_column(text: str) -> Sequence[float]:
    return [float(value) for value in re.findall(r"TTFT ([\d.]+) ms ·", text)]


def test_the_probe_cli_shows_the_ttft_split_and_the_server_metrics() -> None:
    with _LabThread(Lab(cost=COST)) as lab:
        result = CliRunner().invoke(
            cli,
            ["probe", lab.url, "-n", "2", "--prompt-tokens", str(PROMPT_TOKENS), "--max-tokens", str(MAX_TOKENS)],
            env={"COLUMNS": "200"},
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.stdout
    out = result.stdout
    headlines = list(_headlines(out))
    assert len(headlines) == 2
    for headline, ttft in zip(headlines, _ttft_column(out), strict=True):
        # each term is printed to 0.01 ms: the three sides add up to the TTFT within their rounding
        assert headline["client"] + headline["server"] + headline["rest"] == pytest.approx(headline["ttft"], abs=0.02)
        assert headline["ttft"] == pytest.approx(ttft, abs=0.1)  # the cadence line prints TTFT to 0.1 ms
        assert headline["server"] > headline["client"]
    for row in ("connection", "send", "parse", "validate", "queue", "prefill", "network", "other"):
        assert re.search(rf"\b{row}\s+-?[\d.]+ ms", out), row
    assert "header:server-timing:prefill" in out
    assert "server metrics " in out and "read as lab" in out
    assert re.search(r"mean prefill\s+[\d.]+ ms\s+latscope_lab_request_prefill_seconds", out)
