"""The nginx edge's errors, in a module of their own so a command line can catch them without importing the lab."""

from __future__ import annotations


class EdgeError(RuntimeError):
    """The nginx edge could not be used."""


class EdgeUnavailable(EdgeError):
    """nginx is not installed (or the given path is not an executable)."""


class EdgeStartError(EdgeError):
    """nginx exited or did not serve in time; the message carries the tail of its error log."""
