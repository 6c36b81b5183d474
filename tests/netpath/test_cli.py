"""The latscope CLI, started inside the client namespace with ``NetworkPath.popen``, measures the path's distance:
its TCP connect and its wait for the first byte each take about one configured round trip."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from tests.support.netpath import network_path
from tests.support.stream_server import ServerThread, paced_stream

DELAY_MS = 20
CLI = Path(sys.executable).with_name("latscope")


@pytest.mark.skipif(not CLI.exists(), reason="the latscope script is not installed next to this Python")
def test_probe_in_the_namespace_sees_the_round_trip() -> None:
    with network_path(DELAY_MS) as path, ServerThread(paced_stream(3), host=path.server_host) as server:
        done = path.command([str(CLI), "probe", server.base_url, "-m", "m", "-n", "1", "--no-metrics", "--json", "-"])
    assert done.returncode == 0, done.stderr
    request = orjson.loads(done.stdout)["requests"][0]
    connection = request["timeline"]["connection"]
    assert (connection["local_address"], connection["remote_address"]) == (path.client_host, path.server_host)
    rtt = path.rtt_ms
    metrics = request["metrics"]
    assert 0.8 * rtt <= metrics["connect_ms"] <= 1.5 * rtt
    assert 0.8 * rtt <= metrics["wait_ms"] <= 1.5 * rtt  # request out, first byte back: one more round trip
    assert 0.8 * rtt * 1e3 <= connection["tcp_info_at_headers"]["min_rtt_us"] <= 1.5 * rtt * 1e3
