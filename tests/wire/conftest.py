"""Shared fixtures for the wire tests: TLS material and request builders."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from latscope.dialects.base import RequestSpec
from latscope.wire import rawsock
from tests.support.compiled import missing
from tests.support.tls_certs import LocalPKI


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> LocalPKI:
    return LocalPKI(Path(tmp_path_factory.mktemp("pki")))


def chat_spec(*, stream: bool = True, max_tokens: int = 16) -> RequestSpec:
    """A minimal OpenAI chat request."""
    body = orjson.dumps(
        {
            "model": "test-model",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens,
            "stream": stream,
        }
    )
    return RequestSpec(
        method="POST",
        path="/chat/completions",
        body=body,
        headers=[("content-type", "application/json")],
        dialect="openai.chat",
        model="test-model",
    )


@pytest.fixture(params=["python", "compiled"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which reader a kernel-stamped connection (StampedSocket) registers in this test: the Python one, or the
    compiled one (skipped where it was not built, failed instead under LATSCOPE_REQUIRE_COMPILED)."""
    reader = None if request.param == "python" else rawsock._compiled_reader()
    if request.param == "compiled" and reader is None:
        missing("latscope.wire._rawread")
    monkeypatch.setattr(rawsock, "_StampedReader", reader)
    return str(request.param)
