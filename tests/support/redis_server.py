"""A real Redis for the idempotency store's tests: Debian's ``redis-server``, started on a private port with its
own temporary directory, no persistence, loopback only; stopped (and its directory removed) at the end.

Without ``redis-server`` a test skips, except under CI (``CI`` or ``LATSCOPE_REQUIRE_REDIS`` set), where it fails: CI
installs it (``.ci/run``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

#: Set (to anything) where redis-server must be installed, as in CI: a test that needs it then fails, not skips.
REQUIRE_ENV = "LATSCOPE_REQUIRE_REDIS"
READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def _skip_or_fail(message: str) -> NoReturn:
    if os.environ.get("CI") or os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{message}; CI must have it (.ci/run installs it)")
    pytest.skip(message)


def redis_server_binary() -> str:
    """The ``redis-server`` executable (and redis-py, the client the store uses); skips (fails under CI) without
    either."""
    if importlib.util.find_spec("redis") is None:
        _skip_or_fail("redis-py is not installed (pip install 'latscope[redis]')")
    path = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.access(p, os.X_OK)), None
    )
    if path is not None:
        return path
    _skip_or_fail("redis-server is not installed (Debian: apt-get install redis-server)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` child: :attr:`url` while it runs; :meth:`stop` ends it (a test may stop it midway)."""

    def __init__(self) -> None:
        self.binary = redis_server_binary()
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.directory = Path(tempfile.mkdtemp(prefix="latscope-redis-"))
        self._log = self.directory / "redis.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--logfile", str(self._log),
        ]  # fmt: skip
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _answers_ping(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                log = self._log.read_text(errors="replace")[-2000:] if self._log.exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}: {log}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """``with redis_server() as redis:`` a running private Redis at ``redis.url``; skips without redis-server."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()
