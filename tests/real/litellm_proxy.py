"""LiteLLM's proxy: the gateway many users run in front of their models, as a real third-party target.

The proxy runs from its own virtual environment (``litellm[proxy]`` pulls in FastAPI, uvicorn, the OpenAI SDK and
much more that latscope does not need): ``.ci/run`` builds it once and sets ``LATSCOPE_LITELLM`` to its ``litellm``
executable; the default is ``~/.cache/latscope/litellm-venv/bin/litellm``. Without it the tests skip, except under
CI (``CI`` or ``LATSCOPE_REQUIRE_LITELLM`` set), where they fail.

The proxy routes one model name to an OpenAI-compatible upstream (the lab) as ``openai/<model>`` with a dummy key;
it is started offline: the model cost map is read from the package (``LITELLM_LOCAL_MODEL_COST_MAP``), telemetry is
off, no database, and a master key is set (this release refuses to start without one).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.real.conftest import free_port

#: Set (to anything) where LiteLLM must be installed, as in CI: a test that needs it then fails, not skips.
REQUIRE_ENV = "LATSCOPE_REQUIRE_LITELLM"
EXECUTABLE_ENV = "LATSCOPE_LITELLM"
DEFAULT_EXECUTABLE = Path.home() / ".cache" / "latscope" / "litellm-venv" / "bin" / "litellm"
#: The release .ci/run installs (the proxy extra of later ones needs packages the index CI uses does not have).
VERSION = "1.106.12"
#: Its import and start take 5-10 s on an idle 2-core machine; a busy one, several times that.
STARTUP_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
#: The proxy's own key: clients send it as ``Authorization: Bearer``. Not a secret: the proxy listens on loopback.
MASTER_KEY = "sk-latscope-test"
#: What keeps the proxy offline: the bundled model cost map instead of a download, no telemetry.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
}


def _skip_or_fail(message: str) -> NoReturn:
    if os.environ.get("CI") or os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{message}; CI must have it (.ci/run installs it)")
    pytest.skip(message)


def litellm_executable() -> str:
    """The ``litellm`` executable (``$LATSCOPE_LITELLM``, else the default venv's); skips (fails under CI) without."""
    path = Path(os.environ.get(EXECUTABLE_ENV) or DEFAULT_EXECUTABLE)
    if not path.is_file() or not os.access(path, os.X_OK):
        _skip_or_fail(
            f"LiteLLM's proxy is not installed at {path}: set {EXECUTABLE_ENV} "
            f"(.ci/run builds a venv with litellm[proxy]=={VERSION})"
        )
    return str(path)


@dataclass
class LiteLLMProxy:
    """A running LiteLLM proxy: its OpenAI base URL, the model name it routes, its key, process, config and log."""

    base_url: str
    model: str
    api_key: str
    process: subprocess.Popen[bytes]
    config_path: Path
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def proxy_config(
    *,
    upstream_url: str,
    upstream_model: str,
    model: str,
    rpm: int | None = None,
) -> dict[str, object]:
    """LiteLLM's config: ``model`` routed to ``upstream_model`` at the OpenAI-compatible ``upstream_url``.

    ``rpm``: the deployment's requests per minute, enforced by the router's pre-call checks (no database needed);
    with no retries, so a request over the limit gets the router's 429 at once instead of after its backoff.
    """
    params: dict[str, object] = {"model": f"openai/{upstream_model}", "api_base": upstream_url, "api_key": "dummy"}
    router: dict[str, object] = {"num_retries": 0}
    if rpm is not None:
        params["rpm"] = rpm
        router["enable_pre_call_checks"] = True
    return {
        "model_list": [{"model_name": model, "litellm_params": params}],
        "litellm_settings": {"telemetry": False, "num_retries": 0},
        "router_settings": router,
        "general_settings": {"master_key": MASTER_KEY},
    }


def _wait_ready(proxy: LiteLLMProxy, deadline: float) -> None:
    url = proxy.base_url.removesuffix("/v1") + "/health/liveliness"
    while time.monotonic() < deadline:
        if proxy.process.poll() is not None:
            raise RuntimeError(f"litellm exited ({proxy.process.returncode}):\n{proxy.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"litellm not ready after {STARTUP_TIMEOUT_S} s:\n{proxy.log_tail()}")


def _stop(proxy: LiteLLMProxy) -> None:
    """Terminate the proxy (kill it after :data:`STOP_TIMEOUT_S`) and print the end of its log (shown on failure)."""
    proxy.process.terminate()
    try:
        proxy.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proxy.process.kill()
        proxy.process.wait()
    print(f"litellm log ({proxy.log_path}):\n{proxy.log_tail(15)}")


@contextlib.contextmanager
def running_litellm(
    executable: str,
    workdir: Path,
    *,
    upstream_url: str,
    upstream_model: str,
    model: str | None = None,
    rpm: int | None = None,
) -> Iterator[LiteLLMProxy]:
    """Start ``litellm --config CONFIG`` on a free loopback port in front of ``upstream_url`` (see
    :func:`proxy_config`; ``model`` is the name clients ask for, the upstream's by default, so the same request
    body suits both, as ``diagnose --direct`` needs), wait until it answers its liveness route, stop it by pid on
    exit."""
    model = model or upstream_model
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "litellm.json"  # YAML is a superset of JSON: LiteLLM reads it as its YAML config
    config = proxy_config(upstream_url=upstream_url, upstream_model=upstream_model, model=model, rpm=rpm)
    config_path.write_text(json.dumps(config, indent=2))
    port = free_port()
    log_path = workdir / "litellm.log"
    env = {**os.environ, **OFFLINE_ENV}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [executable, "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port),
             "--telemetry", "False"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=workdir,  # it looks for a .env file in its working directory: an empty one
        )  # fmt: skip
    proxy = LiteLLMProxy(f"http://127.0.0.1:{port}/v1", model, MASTER_KEY, process, config_path, log_path)
    try:
        _wait_ready(proxy, time.monotonic() + STARTUP_TIMEOUT_S)
        yield proxy
    finally:
        _stop(proxy)
