"""latscope: find where an LLM API request's latency hides."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``latscope.probe(url)`` without importing the submodule first; the module is callable (see latscope.probe)
    if name == "probe":
        import importlib

        return importlib.import_module("latscope.probe")
    raise AttributeError(f"module 'latscope' has no attribute {name!r}")
