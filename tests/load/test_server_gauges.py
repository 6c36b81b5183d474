"""The bench's view of the target's gauges over a run: scraped beside the load, saved in run.json, drawn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.load.arrivals import ClosedLoop
from latscope.load.bench import bench_async, load_summaries
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.servermetrics import GaugeSampler
from latscope.load.workload import Workload
from latscope.report.run import render_run
from latscope.wire import Timeouts
from latscope.wire.target import Target
from tests.support.stream_server import Received, Reply, ServerThread

#: 4 ms a token: a 40-token stream lasts long enough for several scrapes.
PACED = CostModel.default().with_overrides(decode_base_ms=4.0, decode_per_seq_ms=0.0)


def _config(url: str, concurrency: int) -> BenchConfig:
    return BenchConfig(
        target=Target.resolve(url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
        steps=(ClosedLoop(1), ClosedLoop(concurrency)),
        workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(40)),
        requests=5 * concurrency,
    )


async def test_the_lab_batch_fills_to_its_slots_and_the_queue_builds_beyond_them(tmp_path: Path) -> None:
    async with Lab(cost=PACED, faults=("few-slots",)) as lab:
        sampler_interval = GaugeSampler(lab.url).interval_s
        result = await bench_async(_config(lab.url, 8), tmp_path)
    gauges = result.data["server_gauges"]
    assert gauges["family"] == "lab", gauges
    assert [label for label, _ in gauges["steps"]] == ["concurrency=1", "concurrency=8"], gauges
    running = [p[1] for p in gauges["points"]]
    waiting = [p[2] for p in gauges["points"]]
    assert len(running) >= 2 and sampler_interval == 1.0
    assert max(running) == 4  # the four slots, never more
    assert max(waiting) >= 1, gauges  # the rest queued behind them at 8 concurrent
    console = Console(width=100, record=True, color_system=None)
    render_run(console, result.data, load_summaries(result.data))
    assert "Batch size over time" in console.export_text()


def test_a_target_without_metrics_says_why() -> None:
    async def handler(request: Received, reply: Reply) -> None:
        await reply.send_json(404, {"detail": "Not Found"})

    with ServerThread(handler) as server:
        sampler = GaugeSampler(server.base_url)
        sampler.start()
        asyncio.run(asyncio.sleep(0.2))
        result = sampler.stop()
    assert result["url"].endswith("/metrics") and "404" in result["why"], result
