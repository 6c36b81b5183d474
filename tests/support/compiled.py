"""latscope's optional compiled modules in tests: a case that needs one skips where it was not built, and fails
instead under ``LATSCOPE_REQUIRE_COMPILED`` (CI, which has a C compiler, sets it)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

from latscope import compiled

REQUIRE_ENV = "LATSCOPE_REQUIRE_COMPILED"


def required() -> bool:
    """True where every compiled module must have been built."""
    return bool(os.environ.get(REQUIRE_ENV))


def missing(module: str) -> NoReturn:
    """End the calling test: ``module`` was not built, or is left unused. A skip, or a failure under
    :data:`REQUIRE_ENV`."""
    why = (
        "was not built (no C compiler when the package was installed)"
        if compiled.allowed()
        else f"is left unused ({compiled.PURE_PYTHON_ENV} is set)"
    )
    if required():
        pytest.fail(f"{module} {why}, and {REQUIRE_ENV} asks for it")
    pytest.skip(f"{module} {why}")
