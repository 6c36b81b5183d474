"""Shared fixtures for the wire tests: TLS material and request builders."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from latscope.dialects.base import RequestSpec
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
