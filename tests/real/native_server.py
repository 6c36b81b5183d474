"""llama.cpp's own ``llama-server``: a continuous-batching engine with parallel slots and Prometheus metrics.

``.ci/run`` builds it from the llama.cpp source inside the llama-cpp-python release the other real-server tests use
(the same engine, its own HTTP server) and sets ``LATSCOPE_LLAMA_SERVER`` to the binary; without it these tests skip
with that reason. It serves the tiny random model (tests/support/tiny_llama.py) with ``--parallel N`` slots (each
a sequence the engine batches in every decode step, sharing the context ``-c`` evenly) and ``--metrics``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real.conftest import STARTUP_TIMEOUT_S, LlamaServer, free_port, stop
from tests.support.tiny_llama import write_tiny_llama

#: Context tokens per slot: every slot holds the short prompts of the concurrency sweep and the typical request.
CTX_PER_SLOT = 1024


def llama_server_binary() -> str:
    """The ``llama-server`` binary from ``$LATSCOPE_LLAMA_SERVER``, or skip the test with the reason."""
    binary = os.environ.get("LATSCOPE_LLAMA_SERVER")
    if not binary or not Path(binary).is_file():
        pytest.skip("llama.cpp's llama-server is not built here: set LATSCOPE_LLAMA_SERVER (.ci/run builds it)")
    return binary


def _wait_ready(server: LlamaServer, deadline: float) -> None:
    health = server.base_url.removesuffix("/v1") + "/health"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"llama-server exited ({server.process.returncode}):\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(health, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"llama-server not ready after {STARTUP_TIMEOUT_S} s:\n{server.log_tail()}")


@contextlib.contextmanager
def running_native_server(
    binary: str, workdir: Path, *, parallel: int, host: str = "127.0.0.1"
) -> Iterator[LlamaServer]:
    """Start ``llama-server`` on a free port of ``host`` with ``parallel`` slots and its metrics; stop it on exit."""
    model_path = write_tiny_llama(workdir / "tiny-llama.gguf")
    port = free_port(host)
    log_path = workdir / f"llama-server-{parallel}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                "--model", str(model_path), "--alias", "tiny-llama",
                "--host", host, "--port", str(port),
                "--ctx-size", str(CTX_PER_SLOT * parallel), "--parallel", str(parallel),
                "--threads", "1", "--metrics", "--no-webui",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = LlamaServer(f"http://{host}:{port}/v1", "tiny-llama", process, log_path)
    try:
        _wait_ready(server, time.monotonic() + STARTUP_TIMEOUT_S)
        yield server
    finally:
        stop(server, "llama-server")
