"""latscope: find where an LLM API request's latency hides."""

__version__ = "0.1.0"
