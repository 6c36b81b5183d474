"""Lab replicas: several lab processes behind one port (``latscope lab --replicas N``).

The first lab (the ``latscope lab`` process itself) binds the port with SO_REUSEPORT; N − 1 child processes bind the
same port the same way, and the kernel spreads incoming connections among the listeners (Linux hashes each
connection's addresses onto one of them). Each replica is a whole lab — its own engine, records and metrics — like
replicas of a real deployment behind a load balancer; what they share is what their settings point them at, such as
a Redis idempotency store (``--idempotency-store redis://…``). With the in-memory store each replica dedupes only
the keys that reach it.

Children are started with multiprocessing's ``spawn`` (a fresh interpreter: nothing of the parent's event loop or
sockets is inherited) and run ``target(settings, ready_file, parent_pid)``; ``target`` writes ``ready_file`` once it
serves, stops on SIGTERM, and stops by itself when its parent is gone. :class:`Replicas` waits for every ready file
and stops the children (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path

from latscope.lab.settings import LabSettings

#: How long the replicas get to serve, s: an interpreter start and a lab start each, on a busy 2-core machine.
START_TIMEOUT_S = 30.0
#: How long a stopping replica gets before SIGKILL, s.
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05

ReplicaTarget = Callable[[LabSettings, Path, int], None]


class ReplicaStartError(RuntimeError):
    """A replica exited or did not serve in time; the message says which and how."""


class Replicas:
    """``count`` replica processes running ``target`` with ``settings`` (which name the shared port)."""

    def __init__(self, target: ReplicaTarget, settings: LabSettings, count: int) -> None:
        self.target = target
        self.settings = settings
        self.count = count
        self.processes: list[BaseProcess] = []
        self._dir = Path(tempfile.mkdtemp(prefix="latscope-lab-replicas-"))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    async def start(self) -> None:
        """Start the children and wait until each serves; raises :class:`ReplicaStartError` (the children that did
        start are stopped)."""
        context = multiprocessing.get_context("spawn")
        ready_files = []
        for number in range(2, self.count + 2):
            ready = self._dir / f"replica-{number}.ready"
            child = context.Process(
                target=self.target, args=(self.settings, ready, os.getpid()), name=f"latscope-lab-replica-{number}"
            )
            child.start()
            self.processes.append(child)
            ready_files.append(ready)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not all(path.exists() for path in ready_files):
                for process in self.processes:
                    if process.exitcode is not None:
                        raise ReplicaStartError(f"{process.name} exited with status {process.exitcode}")
                if time.monotonic() > deadline:
                    raise ReplicaStartError(f"the replicas did not serve within {START_TIMEOUT_S:.0f} s")
                await asyncio.sleep(POLL_S)
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise

    def stop(self) -> None:
        """SIGTERM every child, SIGKILL those still there after :data:`STOP_TIMEOUT_S`; remove the ready files."""
        processes, self.processes = self.processes, []
        for process in processes:
            if process.exitcode is None:
                process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.exitcode is None:
                process.kill()
                process.join(STOP_TIMEOUT_S)
        shutil.rmtree(self._dir, ignore_errors=True)
