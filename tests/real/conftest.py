"""A real third-party LLM server for the tests: llama.cpp through llama-cpp-python, serving a tiny random model.

The server runs from its own virtual environment (it pulls in FastAPI/uvicorn and a compiled llama.cpp that
latscope itself does not need). ``.ci/run`` builds it and sets ``LATSCOPE_LLAMA_PYTHON`` to its interpreter; on a
machine without it these tests are skipped with that reason. The model is written by the tests themselves
(tests/support/tiny_llama.py), so nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.tiny_llama import write_tiny_llama

STARTUP_TIMEOUT_S = 120.0


def llama_python() -> str | None:
    """The interpreter that has ``llama_cpp.server``: ``$LATSCOPE_LLAMA_PYTHON``, else this one if it has it."""
    configured = os.environ.get("LATSCOPE_LLAMA_PYTHON")
    if configured:
        return configured
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return None
    return sys.executable


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running llama-cpp-python server: its OpenAI base URL, model id, process and log file."""

    base_url: str
    model: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _wait_ready(server: LlamaServer, deadline: float) -> None:
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"llama-cpp-python server exited ({server.process.returncode}):\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"llama-cpp-python server not ready after {STARTUP_TIMEOUT_S} s:\n{server.log_tail()}")


#: llama-cpp-python's default context in these tests (tokens of prompt the model slot holds).
DEFAULT_N_CTX = 4096


@contextlib.contextmanager
def running_llama_server(
    python: str, workdir: Path, *, n_ctx: int = DEFAULT_N_CTX, host: str = "127.0.0.1"
) -> Iterator[LlamaServer]:
    """Start llama-cpp-python's OpenAI server on a free port of ``host`` (loopback by default; a network path's server
    address for the distance tests) with the tiny model and a context of ``n_ctx`` tokens; stop it by pid on exit."""
    model_path = write_tiny_llama(workdir / "tiny-llama.gguf")
    port = free_port(host)
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                python, "-m", "llama_cpp.server",
                "--model", str(model_path), "--model_alias", "tiny-llama",
                "--host", host, "--port", str(port),
                "--n_ctx", str(n_ctx), "--n_threads", "1", "--verbose", "False",
                # by default llama-cpp-python cancels the running stream when another request arrives (it closes the
                # chunked body unfinished); queueing is what its single model slot does otherwise, and what we test
                "--interrupt_requests", "False",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = LlamaServer(f"http://{host}:{port}/v1", "tiny-llama", process, log_path)
    try:
        _wait_ready(server, time.monotonic() + STARTUP_TIMEOUT_S)
        yield server
    finally:
        stop(server, "llama-cpp-python")


def stop(server: LlamaServer, name: str) -> None:
    """Terminate the server's process (kill it after 10 s) and print the end of its log."""
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    print(f"{name} log ({server.log_path}):\n{server.log_tail(15)}")


def require_llama_python() -> str:
    """The interpreter with ``llama_cpp.server``, or skip the test with the reason."""
    python = llama_python()
    if python is None:
        pytest.skip("llama-cpp-python is not installed here: set LATSCOPE_LLAMA_PYTHON (.ci/run builds it)")
    return python


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python serving the tiny model with a 4096-token context, for the whole session."""
    python = require_llama_python()
    with running_llama_server(python, tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """vLLM's interpreter and the tiny Hugging Face Llama it serves (written once per session), or skip the test
    (tests/real/vllm_server.py)."""
    from tests.real.vllm_server import tiny_model, vllm_python

    python = vllm_python()
    return python, tiny_model(python, tmp_path_factory.mktemp("vllm-model"))
