"""NginxEdge's lifecycle: a private prefix, readiness, clear errors, a stop that leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from pathlib import Path

import pytest

from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.edge import nginx as nginx_module
from latscope.lab.edge.config import EdgeConfig
from latscope.lab.edge.errors import EdgeStartError, EdgeUnavailable
from latscope.lab.edge.lab import EdgeLab
from latscope.lab.edge.nginx import NginxEdge
from latscope.wire import Client
from tests.edge.support import describe, needs_nginx, paced


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_missing_nginx_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nginx_module, "SBIN_DIRS", (str(tmp_path),))
    edge = NginxEdge("http://127.0.0.1:8089")
    with pytest.raises(EdgeUnavailable, match=r"nginx not found: install it \(Debian: apt-get install nginx-light\)"):
        edge.start()


def test_a_given_nginx_path_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EdgeUnavailable, match="nginx not found at"):
        NginxEdge("http://127.0.0.1:8089", nginx=str(tmp_path / "nginx")).start()


def test_the_origin_must_be_plain_http() -> None:
    with pytest.raises(ValueError, match="plain-HTTP origin"):
        NginxEdge("https://127.0.0.1:8089")


@needs_nginx
def test_start_serves_from_a_private_prefix_and_stop_removes_it() -> None:
    with socket.socket() as idle:  # nothing listens here: readiness must not depend on the origin
        idle.bind(("127.0.0.1", 0))
        origin_port = idle.getsockname()[1]
    edge = NginxEdge(f"http://127.0.0.1:{origin_port}/v1", EdgeConfig())
    url = edge.start()
    try:
        assert url == f"https://127.0.0.1:{edge.port}/v1" == edge.url
        assert edge.prefix is not None and edge.pid is not None and edge.cert_path is not None
        prefix, pid = edge.prefix, edge.pid
        assert edge.cert_path.is_relative_to(prefix)
        assert (prefix / "nginx.conf").read_text() == edge.config_text
        assert (prefix / "nginx.pid").read_text().strip() == str(pid)
        assert f"server 127.0.0.1:{origin_port};" in edge.config_text
        assert oct(prefix.stat().st_mode & 0o777) == oct(0o700), "keys and logs are private"
        with socket.create_connection(("127.0.0.1", edge.port), timeout=5):
            pass
    finally:
        code = edge.stop()
    assert code is not None
    assert not _running(pid)
    assert not prefix.exists()
    assert edge.stop() is None  # idempotent


@needs_nginx
def test_a_start_failure_quotes_the_error_log_and_keeps_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        edge = NginxEdge("http://127.0.0.1:8089", EdgeConfig(tls=False), port=port)
        with pytest.raises(EdgeStartError) as failure:
            edge.start()
    message = str(failure.value)
    assert "Address already in use" in message
    assert "kept in" in message
    kept = Path(message.rsplit("kept in ", 1)[1].rstrip(")"))
    try:
        assert (kept / "logs" / "error.log").exists()
    finally:
        shutil.rmtree(kept, ignore_errors=True)


@needs_nginx
async def test_an_edge_proxies_a_lab_origin_as_an_async_context_manager() -> None:
    async with (
        Lab(cost=paced(1.0)) as origin,
        NginxEdge(origin.url, EdgeConfig()) as edge,
        Client(ca_file=str(edge.cert_path)) as client,
    ):
        t = await client.request(chat_request("lab-model", "hello", 5), edge.url)
        assert t.error is None, f"{describe(t)}\n{edge.error_log_tail()}"
        assert t.response_headers.get("server", "").startswith("nginx")
        assert len(origin.records) == 1
        pid = edge.pid
    assert pid is not None and not _running(pid)


@needs_nginx
async def test_a_body_of_several_megabytes_passes_the_edge() -> None:
    padding = "x" * (4 * 1024 * 1024)  # diagnose's slow-request-parsing experiment pads bodies to a few MB
    async with EdgeLab(cost=paced(1.0)) as lab, Client(ca_file=str(lab.cert_path)) as client:
        t = await client.request(chat_request("lab-model", "hello", 2, extra={"user": padding}), lab.url)
        assert t.error is None and t.status == 200, f"{describe(t)}\n{lab.edge and lab.edge.error_log_tail()}"
        assert lab.records[-1].body_bytes > 4 * 1024 * 1024


@needs_nginx
async def test_edge_lab_splits_the_faults_between_nginx_and_the_origin() -> None:
    lab = EdgeLab(faults=("proxy-buffering", "slow-parse", "nagle"))
    assert lab.edge_faults == {"proxy-buffering", "nagle"}
    assert lab.origin_faults == {"slow-parse"}
    async with lab:
        assert lab.lab.faults == {"slow-parse"}
        assert lab.lab.origin.startswith("http://127.0.0.1:")
        assert lab.edge is not None and "proxy_buffering on;" in lab.edge.config_text
        assert "tcp_nodelay off;" in lab.edge.config_text
        assert lab.url.startswith("https://") and lab.origin == lab.url.removesuffix("/v1")
    assert lab.edge is None


async def test_edge_lab_stops_its_origin_when_nginx_cannot_start(tmp_path: Path) -> None:
    lab = EdgeLab(nginx=str(tmp_path / "no-nginx"))
    with pytest.raises(EdgeUnavailable):
        await lab.start()
    assert lab.lab.port != 0  # the origin did start …
    assert not await _accepts(lab.lab.port)  # … and was stopped again


async def _accepts(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True
