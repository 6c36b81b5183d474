"""A target that misbehaves mid-experiment (429s, resets, a dead backend) gives partial results: the affected checks
are "not tested" with the cause, the rest still decide, and nothing raises."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from click.testing import CliRunner

from latscope.checks import CHECKS
from latscope.cli.main import cli
from latscope.diagnose import diagnose, discovery, runner
from latscope.findings import NotTested
from tests.diagnose.flaky_server import flaky_handler
from tests.support.stream_server import Received, Reply, ServerThread, StreamServer


async def test_429s_and_resets_mark_the_affected_checks_not_tested() -> None:
    async with StreamServer(flaky_handler(every_429=3, every_reset=5)) as server:
        result = await diagnose(server.base_url, quick=True)
    reasons = " ".join(o.reason for o in result.outcomes if isinstance(o, NotTested))
    assert result.not_tested, result.to_dict()
    assert "429" in reasons or "rate limited" in reasons
    assert len(result.outcomes) == len(CHECKS)  # every check answered, one way or another
    orjson.dumps(result.to_dict())  # the partial result still serialises
    assert all(e.status == "ok" for e in result.experiments)  # failures were recorded, not raised


async def test_a_backend_that_fails_every_request_after_the_first_gives_only_not_tested() -> None:
    async with StreamServer(flaky_handler(every_429=1, every_reset=0)) as server:
        result = await diagnose(server.base_url, quick=True, only="no-connection-reuse,stream-proxy-buffering")
    assert [o.id for o in result.not_tested] == ["no-connection-reuse", "stream-proxy-buffering"]
    assert all("rate limited" in o.reason for o in result.not_tested)
    assert result.timeline_summary == {"requests": 0}


def test_the_cli_reports_a_misbehaving_target_without_a_traceback() -> None:
    with ServerThread(flaky_handler(every_429=4, every_reset=3)) as server:
        runner = CliRunner()
        result = runner.invoke(cli, ["diagnose", server.base_url, "--quick", "--json", "-"], catch_exceptions=False)
    assert "Traceback" not in result.stdout + result.stderr
    data = orjson.loads(result.stdout)  # written even when nothing could be measured
    assert data["schema"] == "latscope.diagnosis/1" and data["not_tested"]
    # exit 0 when some check decided, 2 ("could not diagnose") when every one was left untested
    assert result.exit_code == (0 if data["diagnosed"] else 2), result.stderr
    if not data["diagnosed"]:
        assert "could not diagnose" in result.stderr


async def test_a_target_that_stops_answering_costs_one_time_bound_not_one_per_experiment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "EXPERIMENT_TIMEOUT_S", 3.0)  # quick mode: 1.5 s per experiment
    monkeypatch.setattr(discovery, "ALIVE_TIMEOUT_S", 1.0)
    release = asyncio.Event()
    answered = flaky_handler(every_429=0, every_reset=0)
    count = 0

    async def handler(request: Received, reply: Reply) -> None:
        nonlocal count
        if request.method == "POST":
            count += 1
            if count > 2:  # the first contact and one more, then silence
                await release.wait()
                return
        await answered(request, reply)

    async with StreamServer(handler) as server:
        try:
            result = await diagnose(server.base_url, quick=True)
        finally:
            release.set()
    assert [e.status for e in result.experiments] == ["timeout"]
    assert {o.id for o in result.not_tested} == {o.id for o in result.outcomes}
    assert any("stopped answering" in o.reason for o in result.not_tested)
    assert result.duration_s < 30.0
