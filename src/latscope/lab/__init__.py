"""The lab: latscope's reference OpenAI-compatible server, with a switch for every catalogued bottleneck.

    async with Lab(profile="naive") as lab:      # in-process, on the caller's event loop
        ...                                      # lab.url, lab.records, lab.scheduler
    with LabProcess(profile="naive") as lab:     # in a child process (``latscope lab``)
        ...

Names are imported on first use, so importing one submodule (the cost model, the fault list) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from latscope.lab.app import Lab
    from latscope.lab.costmodel import CostModel
    from latscope.lab.faults import FAULTS, PROFILES, Fault, Stage, UnknownFaultError, resolve_faults
    from latscope.lab.process import LabProcess, LabStartError
    from latscope.lab.records import RequestRecord
    from latscope.lab.scheduler import Policy
    from latscope.lab.settings import LabSettings

_EXPORTS = {
    "Lab": "latscope.lab.app",
    "LabProcess": "latscope.lab.process",
    "LabStartError": "latscope.lab.process",
    "LabSettings": "latscope.lab.settings",
    "RequestRecord": "latscope.lab.records",
    "CostModel": "latscope.lab.costmodel",
    "Policy": "latscope.lab.scheduler",
    "FAULTS": "latscope.lab.faults",
    "PROFILES": "latscope.lab.faults",
    "Fault": "latscope.lab.faults",
    "Stage": "latscope.lab.faults",
    "UnknownFaultError": "latscope.lab.faults",
    "resolve_faults": "latscope.lab.faults",
}

__all__ = [
    "FAULTS",
    "PROFILES",
    "CostModel",
    "Fault",
    "Lab",
    "LabProcess",
    "LabSettings",
    "LabStartError",
    "Policy",
    "RequestRecord",
    "Stage",
    "UnknownFaultError",
    "resolve_faults",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'latscope.lab' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
