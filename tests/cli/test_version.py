"""``latscope --version``: the version, and which compiled hot paths the install has and uses."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from latscope import compiled
from latscope.cli.main import cli
from tests.support.compiled import required


def test_version_names_the_compiled_modules_the_install_has() -> None:
    result = CliRunner().invoke(cli, ["--version"], env={compiled.PURE_PYTHON_ENV: ""})
    assert result.exit_code == 0, result.output
    first, second = result.output.splitlines()
    assert first.startswith("latscope ")
    have = [name.rsplit(".", 1)[1] for name, present in compiled.built().items() if present]
    assert second.startswith("compiled hot paths: ")
    for name in have:
        assert name in second
    if not have:
        assert "none (pure Python" in second


def test_version_says_when_the_compiled_modules_are_left_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "1")
    assert not compiled.allowed()
    if any(compiled.built().values()):
        assert "unused: LATSCOPE_PURE_PYTHON is set" in compiled.describe()
    monkeypatch.setenv(compiled.PURE_PYTHON_ENV, "0")
    assert compiled.allowed()


@pytest.mark.skipif(not required(), reason="only where a C compiler is required")
def test_every_compiled_module_this_platform_gets_was_built() -> None:
    built = compiled.built()
    assert built["latscope.dialects._templatefit"]
    assert built["latscope.wire._rawread"] == sys.platform.startswith("linux")
