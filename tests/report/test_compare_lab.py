"""``compare`` of real bench runs of the embedded lab: naive vs tuned, and one profile twice."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from latscope.cli.main import cli
from latscope.lab.app import Lab
from latscope.load.arrivals import ClosedLoop
from latscope.load.bench import bench_async
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workload import Workload
from latscope.report.compare.result import compare_runs
from latscope.report.compare.samples import read_samples
from latscope.wire import Timeouts
from latscope.wire.target import Target

pytestmark = pytest.mark.timeout(120)

#: The lab's naive profile changes, for a short request on a kept-alive connection: the parse and validation pass
#: (slow-parse), the queue (FIFO), and the stream start (Nagle holds the first token about 40 ms). The rest of the
#: path is the same in both profiles.
CHANGED_BY_NAIVE = {"server parse", "server validate", "server queue", "first token"}
UNCHANGED = {"dns", "connect", "tls", "send", "server prefill"}


def _bench(profile: str, out: Path) -> Path:
    async def run() -> None:
        async with Lab(profile=profile) as lab:
            config = BenchConfig(
                target=Target.resolve(lab.url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
                steps=(ClosedLoop(2),),
                workload=Workload.single(LengthDist.fixed(1000), LengthDist.fixed(8)),
                requests=30,
                warmup_requests=2,
                server_metrics=False,
            )
            await bench_async(config, out)

    asyncio.run(run())
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    return {
        name: _bench(profile, base / name)
        for name, profile in (("naive", "naive"), ("tuned", "tuned"), ("tuned2", "tuned"))
    }


def test_naive_to_tuned_shows_a_significant_ttft_improvement_in_the_phases_the_lab_changed(
    runs: dict[str, Path],
) -> None:
    result = compare_runs(read_samples(runs["naive"]), read_samples(runs["tuned"]))
    [step] = result.steps
    for q in (0.5, 0.95):
        change = step.change("ttft_ms", q)
        assert change is not None and change.diff.significant and change.diff.delta < 0, change
        attribution = step.attributions[("ttft_ms", q)]
        largest = attribution.largest()
        assert largest is not None and largest[0] in CHANGED_BY_NAIVE, attribution
    # around the median (the tail of 30 requests is a few of them, where a busy host's noise lives) the split is sharp
    change = step.change("ttft_ms", 0.5)
    assert change is not None
    phases = dict(step.attributions[("ttft_ms", 0.5)].phases)
    changed = sum(phases.get(p, 0.0) for p in CHANGED_BY_NAIVE)
    assert changed < 0 and abs(changed) >= 0.8 * abs(change.diff.delta), phases
    for phase in UNCHANGED:
        assert abs(phases.get(phase, 0.0)) < 0.05 * abs(change.diff.delta), (phase, phases)
    assert "significant" in step.verdict() and "of it" in step.verdict()


def test_two_runs_of_one_profile_show_no_significant_ttft_p50_difference(runs: dict[str, Path]) -> None:
    result = compare_runs(read_samples(runs["tuned"]), read_samples(runs["tuned2"]))
    change = result.steps[0].change("ttft_ms", 0.5)
    assert change is not None and not change.diff.significant, change


def test_the_command_prints_the_verdict_and_writes_json(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(cli, ["compare", str(runs["naive"]), str(runs["tuned"]), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output and "where the change lives" in result.output
    data = orjson.loads(out.read_bytes())
    assert data["schema"] == "latscope.compare/1" and data["kind"] == "bench"
    [step] = data["steps"]
    ttft = next(c for c in step["changes"] if c["metric"] == "ttft_ms" and c["q"] == 0.5)
    assert ttft["significant"] and ttft["low"] <= ttft["delta"] <= ttft["high"]
    assert set(step["attribution"]["ttft_ms"]["p50"]["phases"]) >= CHANGED_BY_NAIVE


def test_runs_of_different_workloads_are_refused_unless_forced(runs: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "longer"
    shutil.copytree(runs["tuned2"], other)
    data = orjson.loads((other / "run.json").read_bytes())
    data["config"]["workload"]["classes"][0]["output_tokens"] = "fixed(12)"
    data["config"]["steps"] = [{"kind": "closed", "concurrency": 4}]
    (other / "run.json").write_bytes(orjson.dumps(data))
    refused = CliRunner().invoke(cli, ["compare", str(runs["tuned"]), str(other)])
    assert refused.exit_code != 0
    assert "different workloads" in refused.output and "--force" in refused.output
    assert "output tokens: A fixed(8), B fixed(12)" in refused.output
    assert "step 0: A closed loop, concurrency 2, B closed loop, concurrency 4" in refused.output
    forced = CliRunner().invoke(cli, ["compare", str(runs["tuned"]), str(other), "--force"])
    assert forced.exit_code == 0, forced.output
    assert "compared despite" in forced.output
