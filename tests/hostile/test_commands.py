"""What the commands do with a hostile server, as a user sees it: the exit status says whether anything worked, a
deadline stops a stream that never ends, Ctrl-C stops cleanly and keeps what was measured, a closed keep-alive
connection costs a retry and not an error. Every command runs as a process (tests/support/hostile.py serves)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from latscope.diagnose import diagnose
from latscope.lab.app import Lab
from tests.diagnose.truth import TEST_COST

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
LATSCOPE = str(Path(sys.executable).with_name("latscope"))


class Hostile:
    """``python -m tests.support.hostile MODE`` in a process."""

    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.hostile", mode], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def hostile(request: pytest.FixtureRequest) -> Iterator[str]:
    server = Hostile(request.param)
    try:
        yield server.url
    finally:
        server.stop()


def _run(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [LATSCOPE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _interrupt_after(seconds: float, *args: str, cwd: Path) -> tuple[int, str]:
    """Start ``latscope ARGS``, send it SIGINT (Ctrl-C) after ``seconds``; its exit status and output."""
    # Ctrl-C's default action in the child, whatever this process inherited (a shell without job control starts
    # background jobs with SIGINT ignored, and an ignored signal stays ignored across exec)
    proc = subprocess.Popen(
        [LATSCOPE, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


@pytest.mark.parametrize("hostile", ["empty-200"], indirect=True)
def test_probe_exits_2_when_every_stream_was_empty(hostile: str, tmp_path: Path) -> None:
    done = _run("probe", hostile, "-n", "2", cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    assert "every request failed: stream failed: the stream ended without a token" in done.stdout


@pytest.mark.parametrize("hostile", ["endless-stream"], indirect=True)
def test_probe_max_time_ends_a_stream_that_never_ends(hostile: str, tmp_path: Path) -> None:
    started = time.monotonic()
    done = _run("probe", hostile, "-n", "1", "--max-time", "1", "--no-metrics", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "total timeout of 1 s exceeded during stream" in done.stdout, done.stdout
    assert time.monotonic() - started < 50  # bounded by --max-time, not by the stream


@pytest.mark.parametrize("hostile", ["endless-stream"], indirect=True)
def test_ctrl_c_in_probe_exits_130_and_writes_what_was_measured(hostile: str, tmp_path: Path) -> None:
    code, out = _interrupt_after(3.0, "probe", hostile, "-n", "1", "--no-metrics", "--json", "p.json", cwd=tmp_path)
    assert code == 130, out
    assert "Aborted" not in out and "Traceback" not in out and "interrupted after 1 request" in out
    data = orjson.loads((tmp_path / "p.json").read_bytes())
    assert data["interrupted"] is True
    (request,) = data["requests"]
    assert request["timeline"]["error"]["kind"] == "cancelled" and len(request["timeline"]["events"]) > 10


@pytest.mark.parametrize("hostile", ["models-fail"], indirect=True)
def test_probe_json_is_written_when_the_model_list_fails(hostile: str, tmp_path: Path) -> None:
    done = _run("probe", hostile, "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 2 and "listing models at" in done.stdout and "failed (HTTP 500" in done.stdout
    data = orjson.loads((tmp_path / "p.json").read_bytes())
    assert "the model registry is down" in data["error"] and data["models_timeline"]["status"] == 500


@pytest.mark.parametrize("hostile", ["close-after-response"], indirect=True)
def test_probe_survives_a_server_that_closes_kept_alive_connections(hostile: str, tmp_path: Path) -> None:
    done = _run("probe", hostile, "-n", "3", "--no-metrics", "--json", "p.json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    requests = orjson.loads((tmp_path / "p.json").read_bytes())["requests"]
    retried = [r["timeline"]["stale_retry_error"] is not None for r in requests]
    assert retried == [False, True, True]


@pytest.mark.parametrize("hostile", ["close-after-response"], indirect=True)
def test_bench_survives_a_server_that_closes_kept_alive_connections(hostile: str, tmp_path: Path) -> None:
    done = _run("bench", hostile, "-m", "hostile-model", "-n", "20", "--inline", "-o", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (step,) = orjson.loads((tmp_path / "run" / "run.json").read_bytes())["steps"]
    assert step["summary"]["overall"]["errors"] == 0 and step["summary"]["overall"]["ok"] == 20


@pytest.mark.parametrize("hostile", ["rate-limited"], indirect=True)
def test_bench_exits_2_when_every_request_failed(hostile: str, tmp_path: Path) -> None:
    done = _run("bench", hostile, "-m", "hostile-model", "-n", "5", "--inline", "-o", "run", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "every one of the 5 measured requests failed: http-status (5)" in " ".join(done.stdout.split())


@pytest.mark.parametrize("hostile", ["rate-limited"], indirect=True)
def test_a_server_that_refuses_every_request_for_its_rate_is_diagnosed_as_rate_limited(
    hostile: str, tmp_path: Path
) -> None:
    # the refusals are the diagnosis: the wait they impose, and every other check not tested because of them
    done = _run("diagnose", hostile, "--quick", "-m", "hostile-model", "--json", "d.json", cwd=tmp_path)
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, out
    data = orjson.loads((tmp_path / "d.json").read_bytes())
    assert data["diagnosed"] is True and [f["id"] for f in data["findings"]] == ["rate-limited"]
    assert data["findings"][0]["evidence"]["probe_statuses"] == [429]  # the probe stopped at the first refusal
    assert data["clear"] == [] and data["inconclusive"] == []
    assert any("429" in o["reason"] for o in data["not_tested"])


@pytest.mark.parametrize("hostile", ["reset"], indirect=True)
def test_diagnose_says_it_could_not_diagnose_when_nothing_could_be_measured(hostile: str, tmp_path: Path) -> None:
    done = _run("diagnose", hostile, "--quick", "-m", "hostile-model", "--json", "d.json", cwd=tmp_path)
    out = " ".join(done.stdout.split())
    assert done.returncode == 2, out
    assert "No bottleneck found" not in out and "could not diagnose" in out.lower()
    data = orjson.loads((tmp_path / "d.json").read_bytes())
    assert data["diagnosed"] is False and data["findings"] == []


def test_ctrl_c_in_diagnose_exits_130_and_writes_what_was_measured(tmp_path: Path) -> None:
    # the embedded lab: a few seconds in, the diagnosis is inside its experiments
    code, out = _interrupt_after(8.0, "diagnose", "--json", "d.json", cwd=tmp_path)
    assert code == 130, out
    assert "Aborted" not in out and "Traceback" not in out
    data = orjson.loads((tmp_path / "d.json").read_bytes())
    assert data["interrupted"] is True
    statuses = [e["status"] for e in data["experiments"]]
    assert statuses[-1] == "interrupted" and statuses[0] == "ok", statuses
    assert any("interrupted" in o["reason"] for o in data["not_tested"])


async def test_diagnose_keeps_to_its_budget() -> None:
    cost = TEST_COST
    async with Lab(cost=cost) as lab:
        result = await diagnose(lab.url, quick=True, budget_s=3.0)
    assert result.duration_s < 3.0 + 30.0  # the experiment running at the deadline is cut off, not waited out
    reasons = [o.reason for o in result.not_tested]
    assert any("budget" in r for r in reasons), reasons
    assert any(e.status == "timeout" and "budget" in e.message for e in result.experiments) or any(
        "budget of 3 s ran out" in r for r in reasons
    )
    await asyncio.sleep(0)
