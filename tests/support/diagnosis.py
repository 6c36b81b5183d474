"""What a failed assertion about a diagnosis needs to show: every experiment and every outcome with its evidence."""

from __future__ import annotations

from latscope.diagnose import Diagnosis


def explain(result: Diagnosis) -> str:
    """One line per experiment (status, requests, time) and per outcome (its JSON form), as one string: pytest
    prints a string message whole, where it would shorten a dict."""
    lines = [f"{e.name}: {e.status} {e.requests} requests {e.duration_s:.1f} s {e.message}" for e in result.experiments]
    lines += [f"{type(o).__name__} {o.to_dict()}" for o in result.outcomes]
    return "\n".join(lines)
