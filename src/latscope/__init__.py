"""latscope: find where an LLM API request's latency hides."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``latscope.probe(url)`` / ``latscope.diagnose(url)`` without importing the submodule first; those modules are
    # callable (see latscope.probe and latscope.diagnose)
    if name in ("probe", "diagnose"):
        import importlib

        return importlib.import_module(f"latscope.{name}")
    raise AttributeError(f"module 'latscope' has no attribute {name!r}")
