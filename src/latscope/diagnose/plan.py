"""Which experiments a diagnosis runs: the finding ids asked for (``--only``) decide the families needed.

The baseline always runs (every finding's severity is its cost next to the typical request); its prompt-length sweep
runs only when the queueing experiment needs it to size the long prompt. Experiments run in request-path order.
"""

from __future__ import annotations

from collections.abc import Iterable

from latscope.checks import CHECKS

#: The experiment families in the order they run (the baseline first).
FAMILY_ORDER = ("connection", "parsing", "queueing", "streaming")


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
    """The experiment families the ids need, in running order."""
    needed = {CHECKS[i].family for i in ids}
    return tuple(f for f in FAMILY_ORDER if f in needed)
