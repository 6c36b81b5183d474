"""``latscope diagnose``: experiments that expose each bottleneck, and the checks that name it.

Usage::

    import latscope
    result = await latscope.diagnose("http://127.0.0.1:8000/v1", quick=True)  # = latscope.diagnose.diagnose
    for finding in result.findings:
        print(finding.id, finding.severity, finding.cost_ms)

Modules: :mod:`~latscope.diagnose.runner` (:func:`diagnose`), :mod:`~latscope.diagnose.context` (what experiments
share), :mod:`~latscope.diagnose.discovery` (model discovery, first contact), :mod:`~latscope.diagnose.plan` (ids →
experiments), :mod:`~latscope.diagnose.experiments` (one module per family), :mod:`~latscope.diagnose.summary`
(the typical request), :mod:`~latscope.diagnose.result` (:class:`Diagnosis` and its JSON contract).
"""

from latscope import callable_module
from latscope.diagnose.context import ProgressEvent
from latscope.diagnose.discovery import DiagnoseError, TargetUnreachable
from latscope.diagnose.plan import UnknownFindingError, diagnosed_ids
from latscope.diagnose.result import SCHEMA, Diagnosis, ExperimentRun
from latscope.diagnose.runner import diagnose

callable_module(__name__, diagnose)

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
