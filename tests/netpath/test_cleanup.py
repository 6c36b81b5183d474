"""A :class:`~tests.support.netpath.NetworkPath` leaves nothing behind: not on a normal exit, not when the body
raises or is interrupted, and not when its creator is killed (the relay stops by itself and the next path removes
the namespace)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import netpath
from tests.support.netpath import NetworkPath, network_path, pid_alive

ROOT = Path(__file__).resolve().parents[2]


def _root_links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout


def _assert_gone(namespace: str, devices: tuple[str, str], relay_pid: int) -> None:
    assert namespace not in netpath.namespace_names()
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = _root_links()
    assert all(f": {device}:" not in links and f": {device}@" not in links for device in devices), links
    assert not pid_alive(relay_pid)


def _remember(path: NetworkPath) -> tuple[str, tuple[str, str], int]:
    assert path.relay_pid is not None
    return path.namespace, (path.client_device, path.server_device), path.relay_pid


def test_a_normal_exit_removes_everything() -> None:
    with network_path(5) as path:
        namespace, devices, relay_pid = _remember(path)
        assert namespace in netpath.namespace_names()
        assert f": {path.server_device}:" in _root_links()
        assert pid_alive(relay_pid)
    _assert_gone(namespace, devices, relay_pid)
    assert path.relay_stats is not None  # the relay said goodbye with its counters


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_exception_in_the_body_removes_everything(error: type[BaseException]) -> None:
    with pytest.raises(error), network_path(5) as path:
        remembered = _remember(path)
        raise error("the body failed")
    _assert_gone(*remembered)


@pytest.mark.parametrize("step", ["_start_relay", "_probe"])
def test_an_interrupted_setup_removes_what_it_made(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    made: list[NetworkPath] = []

    def interrupted(self: NetworkPath, *args: object) -> None:
        made.append(self)
        raise KeyboardInterrupt  # a Ctrl-C in the middle of __enter__

    monkeypatch.setattr(NetworkPath, step, interrupted)
    with pytest.raises(KeyboardInterrupt), network_path(5):
        pytest.fail("the body must not run")
    (path,) = made
    assert path.namespace not in netpath.namespace_names()
    links = _root_links()
    assert f": {path.server_device}:" not in links and f": {path.client_device}:" not in links
    if path.relay_pid is not None:
        assert not pid_alive(path.relay_pid)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_stale_namespace_of_a_dead_creator_is_removed() -> None:
    stale = f"{netpath.NAMESPACE_PREFIX}-{_dead_pid()}-0"
    subprocess.run(["ip", "netns", "add", stale], check=True, timeout=10)
    try:
        with network_path(0) as path:
            assert stale not in netpath.namespace_names()
            assert path.namespace in netpath.namespace_names()  # our own, with a live pid, is kept
    finally:
        if stale in netpath.namespace_names():
            subprocess.run(["ip", "netns", "delete", stale], check=False, timeout=10)


_KILLED_CREATOR = """
import sys, time
from tests.support.netpath import NetworkPath
path = NetworkPath(one_way_delay_ms=5).__enter__()
print(path.namespace, path.client_device, path.server_device, path.relay_pid, flush=True)
time.sleep(60)
"""


def test_a_killed_creator_leaves_no_relay_and_no_devices() -> None:
    netpath.require_support()
    creator = subprocess.Popen([sys.executable, "-c", _KILLED_CREATOR], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert creator.stdout is not None
        namespace, client_device, server_device, relay = creator.stdout.readline().split()
    finally:
        creator.send_signal(signal.SIGKILL)  # no atexit, no finally: only the kernel's cleanup runs
        creator.wait(10)
    relay_pid = int(relay)
    deadline = time.monotonic() + 5
    while pid_alive(relay_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(relay_pid)
    links = _root_links()
    assert f": {server_device}:" not in links and f": {client_device}:" not in links
    # only the namespace outlives a killed creator (unless a parallel run's path already removed it) ...
    with network_path(0):
        assert namespace not in netpath.namespace_names()  # ... until the next path starts


def test_popen_runs_inside_the_namespace() -> None:
    with network_path(0) as path:
        inside = path.command(["ip", "-4", "-o", "addr", "show"])
        routes = path.command(["ip", "-4", "route", "show"])
    assert inside.returncode == 0, inside.stderr
    assert f"inet {path.client_host}/30" in inside.stdout
    assert path.server_host not in inside.stdout
    assert "default" not in routes.stdout  # nothing in the namespace can reach beyond the path
    outside = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    assert f"inet {path.client_host}/" not in outside
