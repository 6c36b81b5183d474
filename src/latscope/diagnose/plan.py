"""Which experiments a diagnosis runs: the finding ids asked for (``--only``) decide the families needed.

The baseline always runs (every finding's severity is its cost next to the typical request); its prompt-length sweep
runs only when an experiment that needs it runs (``Experiment.needs_sweep``: the queueing experiment sizes its long
prompt from it). Experiments run in the registry's order, request-path order.
"""

from __future__ import annotations

from collections.abc import Iterable

from latscope.checks import CHECKS
from latscope.diagnose.experiments import EXPERIMENTS


class UnknownFindingError(ValueError):
    """``--only`` named an id that diagnose does not check; the message lists the ids it does."""


def diagnosed_ids() -> tuple[str, ...]:
    """Every finding id a diagnosis can decide, in catalogue order."""
    return tuple(CHECKS)


def select(only: str | Iterable[str] | None) -> tuple[str, ...]:
    """The ids to decide: all of them for None, else the given ones (a comma-separated string or an iterable),
    in catalogue order. Raises :class:`UnknownFindingError` for an id no check decides."""
    if only is None:
        return diagnosed_ids()
    items = only.split(",") if isinstance(only, str) else list(only)
    wanted = {item.strip() for item in items if item.strip()}
    if not wanted:
        raise UnknownFindingError(f"no finding id given; known ids: {', '.join(diagnosed_ids())}")
    unknown = sorted(wanted - CHECKS.keys())
    if unknown:
        raise UnknownFindingError(
            f"diagnose does not check {', '.join(unknown)}; it checks: {', '.join(diagnosed_ids())}"
        )
    return tuple(i for i in diagnosed_ids() if i in wanted)


def families_for(ids: Iterable[str]) -> tuple[str, ...]:
    """The experiment families the ids need, in running order (the order of :data:`EXPERIMENTS`)."""
    needed = {CHECKS[i].family for i in ids}
    return tuple(f for f in EXPERIMENTS if f in needed)
