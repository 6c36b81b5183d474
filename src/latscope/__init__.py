"""latscope: find where an LLM API request's latency hides."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``latscope.probe(url)`` / ``latscope.diagnose(url)`` without importing the submodule first; those modules are
    # callable (see callable_module)
    import importlib

    if name in ("probe", "diagnose"):
        return importlib.import_module(f"latscope.{name}")
    if name == "Target":  # ``latscope.Target.resolve(url, ...)``: what probe, diagnose and bench are pointed at
        return importlib.import_module("latscope.wire.target").Target
    raise AttributeError(f"module 'latscope' has no attribute {name!r}")


def callable_module(name: str, function: Callable[..., Any]) -> None:
    """Make the module called ``name`` callable as ``function``: ``latscope.probe(url)`` calls
    :func:`latscope.probe.probe` although ``latscope.probe`` is the module (the import system puts the submodule
    where the function would be)."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    sys.modules[name].__class__ = CallableModule
