"""A short run of every fuzz target (``python -m tests.fuzz TARGET SECONDS`` runs them for longer)."""

from __future__ import annotations

import pytest

from tests.fuzz.targets import TARGETS, run

#: seconds per target in the suite
SECONDS = 3.0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_target_finds_nothing_in_a_short_run(name: str) -> None:
    assert run(name, SECONDS) > 0
