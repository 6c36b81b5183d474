"""A real two-node Ray cluster on this machine: ``ray start --head`` plus a second node joining it (two "hosts").

Small on purpose: one CPU per node, no dashboard, a 200 MB object store, its own temporary directory and free ports
on 127.0.0.1. Each ``ray start`` runs in a session of its own, which every process it starts inherits (Ray's agents
and workers rename themselves, overwriting their command lines and environments, so neither tells); stopping the
cluster kills exactly the processes of those sessions (``ray stop`` would stop every Ray cluster of this user on the
machine).

Without Ray a test skips, except under CI (``CI`` or ``LATSCOPE_REQUIRE_RAY`` set), where it fails: CI installs
``latscope[test]``, which has it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import pytest

REQUIRE_ENV = "LATSCOPE_REQUIRE_RAY"


#: Bytes of each node's object store (Ray's minimum is 75 MB; record batches of a short run are a few MB).
OBJECT_STORE_BYTES = 200_000_000

ROOT = Path(__file__).resolve().parents[2]


def require_ray() -> None:
    """Skip (fail under CI) when Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        message = "ray is not installed (pip install 'latscope[ray]')"
        if os.environ.get("CI") or os.environ.get(REQUIRE_ENV):
            pytest.fail(message + "; CI must have it (the test extra installs it)")
        pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ray_executable() -> str:
    """The ``ray`` command of this interpreter's environment."""
    candidate = Path(sys.executable).parent / "ray"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("ray")
    if found is None:
        pytest.fail("ray is importable but its `ray` command is not on PATH")
    return found


class RayCluster:
    """``with RayCluster(nodes=2) as address:`` — the head's ``127.0.0.1:PORT``; every process gone on exit."""

    def __init__(self, nodes: int = 2, cpus_per_node: int = 1, *, fast_failure_detection: bool = True) -> None:
        """``fast_failure_detection``: health checks every 300 ms, so a killed node is declared dead within about a
        second (the tests that kill one); off, Ray's own defaults, as a user's cluster runs (the benchmarks)."""
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        # short: Ray puts unix sockets under it, and their paths are limited to 107 bytes
        self.temp_dir = tempfile.mkdtemp(prefix="lsray-", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        env = dict(os.environ)
        # the actors import latscope: the raylet's environment is every worker process's
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.env = env
        if fast_failure_detection:
            # a dead node is declared dead within about a second (Ray's default health check takes 15 s or more)
            env["RAY_health_check_period_ms"] = "300"
            env["RAY_health_check_timeout_ms"] = "300"
            env["RAY_health_check_failure_threshold"] = "3"
        self.sessions: list[int] = []  #: session ids of the ``ray start`` commands, head first

    def _common(self) -> list[str]:
        return [
            f"--num-cpus={self.cpus_per_node}",
            "--num-gpus=0",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            f"--dashboard-agent-listen-port={free_port()}",
            "--node-ip-address=127.0.0.1",
            "--disable-usage-stats",
        ]

    def _start(self, args: list[str]) -> None:
        proc = subprocess.Popen(
            [ray_executable(), "start", *args, *self._common()],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.sessions.append(proc.pid)
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed ({proc.returncode}):\n{out}")

    def __enter__(self) -> str:
        try:
            self._start(
                [
                    "--head",
                    f"--port={self.port}",
                    "--include-dashboard=false",
                    f"--dashboard-port={free_port()}",
                    f"--temp-dir={self.temp_dir}",
                ]
            )
            for _ in range(self.nodes - 1):
                self._start([f"--address={self.address}"])
            self._wait_for_nodes()
        except BaseException:
            self.stop()
            raise
        return self.address

    def _wait_for_nodes(self, timeout_s: float = 60.0) -> None:
        code = (
            "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))"
        )
        deadline = time.monotonic() + timeout_s
        while True:
            done = subprocess.run(
                [sys.executable, "-c", code, self.address],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            alive = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            if alive.isdigit() and int(alive) >= self.nodes:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {alive or 0} of {self.nodes} Ray nodes came up:\n{done.stderr[-2000:]}")
            time.sleep(1.0)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def kill_node(self, index: int) -> None:
        """Kill every process of node ``index`` (0 is the head) at once, as a machine that goes away."""
        for pid in self.pids([self.sessions[index]]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def pids(self, sessions: list[int] | None = None) -> list[int]:
        """Processes of this cluster (or of the nodes started as ``sessions``): those in the sessions of its
        ``ray start`` commands."""
        wanted = set(self.sessions if sessions is None else sessions)
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session …
            if int(fields[3]) in wanted and fields[0] != "Z":
                out.append(int(entry.name))
        return out

    def stop(self) -> None:
        """Terminate the cluster's processes (then kill the stragglers) and remove its directory."""
        for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and self.pids():
                time.sleep(0.1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
