"""Shared by every test: secrets registered by one test (``-H``, ``--api-key``) do not leak into the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from latscope.timeline.redact import forget_secrets


@pytest.fixture(autouse=True)
def _fresh_secret_registry() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()
