"""What a failed assertion about a diagnosis needs to show: every experiment and every outcome with its evidence."""

from __future__ import annotations

from collections.abc import Iterable

from latscope.diagnose import Diagnosis


def explain(result: Diagnosis, first: Iterable[str] = ()) -> str:
    """The outcomes of the ids in ``first`` (those the assertion is about), then one line per experiment (status,
    requests, time) and per outcome (its JSON form), as one string: pytest prints a string message whole, where it
    would shorten a dict, but a CI log may keep only its head and tail."""
    wanted = set(first)
    lines = [f"{type(o).__name__} {o.to_dict()}" for o in result.outcomes if o.id in wanted]
    lines += [
        f"{e.name}: {e.status} {e.requests} requests {e.duration_s:.1f} s {e.message}" for e in result.experiments
    ]
    lines += [f"{type(o).__name__} {o.to_dict()}" for o in result.outcomes if o.id not in wanted]
    return "\n".join(lines)
