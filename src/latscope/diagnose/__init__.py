"""``latscope diagnose``: experiments that expose each bottleneck, and the checks that name it.

Usage::

    import latscope
    result = await latscope.diagnose("http://127.0.0.1:8000/v1", quick=True)  # = latscope.diagnose.diagnose
    for finding in result.findings:
        print(finding.id, finding.severity, finding.cost_ms)

Modules: :mod:`~latscope.diagnose.runner` (:func:`diagnose`), :mod:`~latscope.diagnose.context` (what experiments
share), :mod:`~latscope.diagnose.target` (model discovery, first contact), :mod:`~latscope.diagnose.plan` (ids →
experiments), :mod:`~latscope.diagnose.experiments` (one module per family), :mod:`~latscope.diagnose.summary`
(the typical request), :mod:`~latscope.diagnose.result` (:class:`Diagnosis` and its JSON contract).
"""

import sys
import types
from typing import Any

from latscope.diagnose.context import ProgressEvent
from latscope.diagnose.plan import UnknownFindingError, diagnosed_ids
from latscope.diagnose.result import SCHEMA, Diagnosis, ExperimentRun
from latscope.diagnose.runner import diagnose
from latscope.diagnose.target import DiagnoseError, TargetUnreachable


class _CallableModule(types.ModuleType):
    """Makes ``latscope.diagnose(url)`` call :func:`diagnose` although ``latscope.diagnose`` is this package."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return diagnose(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "SCHEMA",
    "DiagnoseError",
    "Diagnosis",
    "ExperimentRun",
    "ProgressEvent",
    "TargetUnreachable",
    "UnknownFindingError",
    "diagnose",
    "diagnosed_ids",
]
