"""``latscope bench --ray`` on a real Ray cluster: a head node and a second node on this machine (two "hosts"), two
actors spread over them, the lab as the target."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.load.arrivals import ClosedLoop, InterArrival, OpenLoop
from latscope.load.bench import run_bench
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.onray import RayUnavailable
from latscope.load.workload import Workload
from latscope.runs.storage import read_run_json
from latscope.wire import Timeouts
from latscope.wire.target import Target
from tests.support.otlp_receiver import LabThread
from tests.support.raycluster import RayCluster, free_port, require_ray

pytestmark = pytest.mark.timeout(150)

RATE = 50.0
DURATION_S = 3.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    require_ray()
    with RayCluster(nodes=2, cpus_per_node=1) as address:
        yield address


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    # a cheap model: the lab answers in a few ms, so the run measures the client's pacing, not the server's
    cost = CostModel.default().with_overrides(prefill_per_token_ms=0.01, decode_base_ms=0.5)
    with LabThread(cost=cost) as lab:
        yield lab


def config(url: str, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = {
        "target": Target.resolve(url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
        "steps": (OpenLoop(RATE, InterArrival.CONSTANT),),
        "workload": Workload.single(LengthDist.fixed(8), LengthDist.fixed(4)),
        "model": "lab-model",
        "duration_s": DURATION_S,
        "workers": 2,
        "server_metrics": False,
    }
    base.update(kw)
    return BenchConfig(**base)


def test_an_open_loop_on_two_ray_nodes_records_every_request_once_at_the_rate(
    cluster: str, lab: Lab, tmp_path: Path
) -> None:
    ray_dir, local_dir = tmp_path / "ray", tmp_path / "local"
    result = run_bench(config(lab.url), ray_dir, ray_address=cluster)
    requests = pd.read_parquet(ray_dir / "requests.parquet")
    expected = int(RATE * DURATION_S)  # constant arrivals: exactly this many start within the duration
    assert sorted(requests.request_id) == list(range(expected))
    assert requests.ok.all() and sorted(requests.worker.unique()) == [0, 1]
    [step] = result.steps
    assert step.achieved_rps is not None and abs(step.achieved_rps - RATE) <= 0.01 * RATE
    # the actors ran on the two nodes, each with its clock offset and its uncertainty
    actors = read_run_json(ray_dir)["steps"][0]["ray"]["actors"]
    assert len({a["node_id"] for a in actors}) == 2
    for a in actors:
        assert a["state"] == "done" and a["host"]
        assert a["clock"]["exchanges"] == 20 and 0 < a["clock"]["uncertainty_ms"] < 50
        assert abs(a["clock"]["offset_ms"]) <= a["clock"]["uncertainty_ms"]  # one machine: one monotonic clock

    # the same run directory as a local run: file names and both tables' schemas
    run_bench(config(lab.url, duration_s=None, requests=10, workers=1), local_dir)
    assert sorted(p.name for p in ray_dir.iterdir()) == sorted(p.name for p in local_dir.iterdir())
    for name in ("requests.parquet", "events.parquet"):
        assert pq.read_schema(ray_dir / name) == pq.read_schema(local_dir / name)
    ray_json, local_json = read_run_json(ray_dir), read_run_json(local_dir)
    assert set(local_json) <= set(ray_json) and ray_json["ray"] == {"address": cluster}
    assert set(local_json["steps"][0]) | {"ray"} == set(ray_json["steps"][0])


def test_an_actor_killed_mid_step_leaves_a_completed_run_with_its_lost_requests_counted(
    cluster: str, lab: Lab, tmp_path: Path
) -> None:
    import ray

    killed: list[str] = []

    def kill_worker_1_midway(step: int, snapshots: dict[int, dict[str, Any]]) -> None:
        if not killed and snapshots.get(1, {}).get("dispatched", 0) >= 30:
            name = f"latscope-{tmp_path.name}-s0-w1"
            ray.kill(ray.get_actor(name))
            killed.append(name)

    result = run_bench(config(lab.url, duration_s=4.0), tmp_path, ray_address=cluster, on_progress=kill_worker_1_midway)
    assert killed and not result.interrupted
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests.request_id.is_unique
    facts = read_run_json(tmp_path)["steps"][0]["ray"]
    lost_actor = next(a for a in facts["actors"] if a["worker"] == 1)
    assert lost_actor["state"] == "lost" and "RayActorError" in lost_actor["lost_reason"]
    assert facts["actors_lost"] == 1 and facts["requests_not_sent"] > 0
    # worker 0 ran its whole share; worker 1's share is what it reported, what it lost, and what it never sent
    share = int(RATE * 4.0) // 2
    assert (requests.worker == 0).sum() == share and requests[requests.worker == 0].ok.all()
    lost = requests[requests.error_kind == "worker-lost"]
    assert len(lost) == facts["requests_lost"] and (lost.worker == 1).all()
    assert lost.error_message.str.contains("RayActorError").all()
    assert (requests.worker == 1).sum() + facts["requests_not_sent"] == share
    assert facts["missing_share"] == pytest.approx((len(lost) + facts["requests_not_sent"]) / (2 * share))
    [step] = result.steps
    assert step.overall.errors_by_kind.get("worker-lost") == len(lost)
    assert any("Ray actor(s) lost" in w and "missing" in w for w in step.warnings)

    # the report shows where each actor ran, its clock offset and what was lost
    from click.testing import CliRunner

    from latscope.cli.report import command as report_command

    shown = CliRunner().invoke(report_command, [str(tmp_path)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "Ray actors" in shown.output and "lost:" in shown.output and "RayActorError" in shown.output


def test_a_node_killed_mid_step_leaves_a_completed_run_with_its_lost_requests_counted(lab: Lab, tmp_path: Path) -> None:
    require_ray()
    own = RayCluster(nodes=2, cpus_per_node=1)  # its own: this one loses a node
    with own as address:
        killed: list[bool] = []

        def kill_the_second_node_midway(step: int, snapshots: dict[int, dict[str, Any]]) -> None:
            if not killed and sum(s.get("dispatched", 0) for s in snapshots.values()) >= 60:
                own.kill_node(1)
                killed.append(True)

        result = run_bench(
            config(lab.url, duration_s=4.0), tmp_path, ray_address=address, on_progress=kill_the_second_node_midway
        )
    assert killed and not result.interrupted
    facts = read_run_json(tmp_path)["steps"][0]["ray"]
    [lost_actor] = [a for a in facts["actors"] if a["state"] == "lost"]
    assert "RayActorError" in lost_actor["lost_reason"]
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert requests.request_id.is_unique
    share, w = int(RATE * 4.0) // 2, lost_actor["worker"]
    assert (requests.worker == 1 - w).sum() == share and requests[requests.worker == 1 - w].ok.all()
    lost = requests[requests.error_kind == "worker-lost"]
    assert len(lost) == facts["requests_lost"] and (lost.worker == w).all()
    assert (requests.worker == w).sum() + facts["requests_not_sent"] == share and facts["requests_not_sent"] > 0


def test_closed_loop_users_are_split_across_the_actors(cluster: str, lab: Lab, tmp_path: Path) -> None:
    result = run_bench(
        config(lab.url, steps=(ClosedLoop(4),), duration_s=None, requests=24), tmp_path, ray_address=cluster
    )
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    assert sorted(requests.request_id) == list(range(24)) and requests.ok.all()
    assert requests.groupby("worker").size().to_dict() == {0: 12, 1: 12}
    assert result.steps[0].overall.ok == 24


def test_no_cluster_at_the_address_is_a_clear_error(tmp_path: Path) -> None:
    require_ray()
    with pytest.raises(RayUnavailable, match="no Ray cluster reachable"):
        run_bench(config("http://127.0.0.1:9/v1"), tmp_path, ray_address=f"127.0.0.1:{free_port()}")


def test_without_ray_installed_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    with pytest.raises(RayUnavailable, match=r"pip install 'latscope\[ray\]'"):
        run_bench(config("http://127.0.0.1:9/v1"), tmp_path, ray_address="auto")


def test_the_command_line_runs_a_step_on_the_cluster(cluster: str, lab: Lab, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from latscope.cli.bench import command

    out = tmp_path / "run"
    args = [lab.url, "--ray", cluster, "-m", "lab-model", "-r", "20", "-n", "20", "--workers", "2", "--no-progress"]
    result = CliRunner().invoke(command, [*args, "--no-server-metrics", "--prompt-tokens", "8", "-o", str(out)])
    assert result.exit_code == 0, result.output
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == 20 and requests.ok.all() and sorted(requests.worker.unique()) == [0, 1]
    assert read_run_json(out)["ray"] == {"address": cluster}


def test_ray_and_inline_together_are_a_usage_error() -> None:
    from click.testing import CliRunner

    from latscope.cli.bench import command

    result = CliRunner().invoke(command, ["http://127.0.0.1:9/v1", "--ray", "--inline"])
    assert result.exit_code == 2 and "--inline" in result.output


def test_ctrl_c_stops_every_actor_and_the_run_is_saved(cluster: str, lab: Lab, tmp_path: Path) -> None:
    pressed: list[bool] = []

    def ctrl_c_midway(step: int, snapshots: dict[int, dict[str, Any]]) -> None:
        if not pressed and sum(s.get("dispatched", 0) for s in snapshots.values()) >= 40:
            pressed.append(True)
            raise KeyboardInterrupt

    result = run_bench(config(lab.url, duration_s=20.0), tmp_path, ray_address=cluster, on_progress=ctrl_c_midway)
    assert pressed and result.interrupted
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    # both actors stopped within a second or so of the interrupt, long before the 20 s, and reported everything
    assert 40 <= len(requests) < 0.5 * RATE * 20.0 and requests.request_id.is_unique
    assert sorted(requests.worker.unique()) == [0, 1] and (requests.error_kind != "worker-lost").all()
    facts = read_run_json(tmp_path)["steps"][0]
    assert facts["interrupted"] and facts["ray"]["actors_lost"] == 0


def test_more_actors_than_the_cluster_has_cpus_is_a_usage_error(cluster: str, lab: Lab, tmp_path: Path) -> None:
    from latscope.load.config import BenchConfigError

    with pytest.raises(BenchConfigError, match="has 2 CPUs"):
        run_bench(config(lab.url, workers=3), tmp_path, ray_address=cluster)
