"""Run the lab in a child process: ``latscope diagnose``'s embedded default, and tests that want the lab on its own
core (the client's measurements are then not disturbed by the server's work on the same event loop).

Usage::

    with LabProcess(profile="naive") as lab:      # or: async with LabProcess(...) as lab
        print(lab.url)

The child is ``python -m latscope.cli.main lab --port 0 --ready-file F ...``; the parent waits until ``F`` appears
(the child writes it atomically once it serves), and stops the child with SIGINT (its Ctrl-C path), then SIGKILL
if it does not exit in time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from latscope.lab.managed import ManagedProcess

#: How often the parent looks for the ready file, s.
POLL_INTERVAL_S = 0.02
#: How long a stopping child gets before SIGKILL, s.
STOP_TIMEOUT_S = 10.0


class LabStartError(RuntimeError):
    """The lab child process exited or did not become ready in time; the message carries its stderr tail."""


class LabProcess(ManagedProcess):
    """A lab child process. ``args`` are extra ``latscope lab`` options (``["--fault", "nagle"]``)."""

    def __init__(
        self,
        *,
        profile: str = "tuned",
        faults: Sequence[str] = (),
        no_faults: Sequence[str] = (),
        tls: bool = False,
        truth: bool = False,
        zero_cost: bool = False,
        host: str = "127.0.0.1",
        args: Sequence[str] = (),
        ready_timeout_s: float = 30.0,
        python: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.ready_timeout_s = ready_timeout_s
        self.url: str | None = None  #: the base URL (``.../v1``) once ready
        self.cert_path: Path | None = None  #: the certificate to trust, with ``tls``
        self._dir = Path(tempfile.mkdtemp(prefix="latscope-lab-proc-"))
        self._ready_file = self._dir / "ready"
        self._stderr_path = self._dir / "stderr.log"
        argv = [
            python or sys.executable,
            "-m",
            "latscope.cli.main",
            "lab",
            "--host",
            host,
            "--port",
            "0",
            "--profile",
            profile,
            "--ready-file",
            str(self._ready_file),
        ]
        for name in faults:
            argv += ["--fault", name]
        for name in no_faults:
            argv += ["--no-fault", name]
        if tls:
            argv.append("--tls")
        if truth:
            argv.append("--truth")
        if zero_cost:
            argv.append("--zero-cost")
        self.argv = [*argv, *args]
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> str:
        """Start the child and wait until it serves; return its base URL. Raises :class:`LabStartError`."""
        self._stderr = self._stderr_path.open("wb")
        env = {**os.environ, **(self._env or {})}
        self._proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self._stderr, env=env)
        polls = max(1, int(self.ready_timeout_s / POLL_INTERVAL_S))
        for _ in range(polls):
            if self._ready_file.exists():
                lines = self._ready_file.read_text().splitlines()
                self.url = lines[0]
                self.cert_path = Path(lines[1]) if len(lines) > 1 else None
                return self.url
            if self._proc.poll() is not None:
                message = f"the lab exited with status {self._proc.returncode}: {self._stderr_tail()}"
                self.stop()
                raise LabStartError(message)
            time.sleep(POLL_INTERVAL_S)
        message = f"the lab was not ready after {self.ready_timeout_s:.0f} s: {self._stderr_tail()}"
        self.stop()
        raise LabStartError(message)

    def stop(self) -> int | None:
        """Stop the child (SIGINT, then SIGKILL after :data:`STOP_TIMEOUT_S`); return its exit status."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT if os.name == "posix" else signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(STOP_TIMEOUT_S)
            code = proc.returncode
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        for path in (self._ready_file, self._stderr_path):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # something else was written there; leave it for the temp cleaner
            self._dir.rmdir()
        return code

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is not None:
            self._stderr.flush()
        try:
            text = self._stderr_path.read_bytes()[-limit:].decode("utf-8", "replace").strip()
        except OSError:
            return "(no stderr)"
        return text or "(no stderr)"
