"""What an experiment is, for the registry in :mod:`latscope.diagnose.experiments`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from latscope.checks.baseline import BaselineEvidence
from latscope.diagnose.context import Context


@dataclass(frozen=True, slots=True)
class Prior:
    """What the baseline measured before the other experiments run: its evidence (None when it failed) and how many
    tokens the typical request generates (what the streaming experiment streams)."""

    baseline: BaselineEvidence | None
    typical_max_tokens: int


@dataclass(frozen=True, slots=True)
class Experiment:
    """One registered experiment: the evidence family it produces (the checks of that family read it), what it
    sends at most, and how to run it.

    ``planned_requests(ctx)`` is the request count the progress display counts towards (about: an experiment may
    stop early or add a few); ``run(ctx, prior)`` sends its requests and returns its evidence (an instance of the
    class its family's check module defines, e.g. :class:`latscope.checks.parsing.ParsingEvidence`).
    ``needs_sweep``: the baseline's prompt-length sweep is run because this experiment uses it.
    """

    family: str
    description: str  #: one line for ``--help``: what it sends and what it tells apart
    planned_requests: Callable[[Context], int]
    run: Callable[[Context, Prior], Awaitable[Any]]
    needs_sweep: bool = False
