"""latscope's optional compiled modules: which ones this install has, and the switch that leaves them unused.

Two hot paths have a C implementation next to the Python one, built when the package is installed where a C
compiler is at hand (``hatch_build.py``) and skipped otherwise: the kernel-stamped connection's read
(``latscope.wire._rawread``, Linux) and the fit of a run of token events to their template
(``latscope.dialects._templatefit``). The Python code stays the reference and the fallback; both give the same
results, the compiled ones at less CPU per read and per event (benchmarks/read_cost.py,
benchmarks/client_overhead.py).

``LATSCOPE_PURE_PYTHON=1`` in the environment leaves them unused (read when a module that uses one is imported), so
the two can be compared, or the compiled one ruled out.
"""

from __future__ import annotations

import importlib.util
import os

#: the environment variable that, set to anything but ``0`` or empty, leaves the compiled modules unused
PURE_PYTHON_ENV = "LATSCOPE_PURE_PYTHON"
#: every optional compiled module, by import name (hatch_build.py's EXTENSIONS names their sources)
MODULES = ("latscope.wire._rawread", "latscope.dialects._templatefit")


def allowed() -> bool:
    """False when :data:`PURE_PYTHON_ENV` asks for the Python code alone."""
    return os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


def built() -> dict[str, bool]:
    """Each of :data:`MODULES` and whether this install has it (built, whether or not :func:`allowed`)."""
    return {name: importlib.util.find_spec(name) is not None for name in MODULES}


def describe() -> str:
    """One line for ``latscope --version``: which compiled modules this install has and whether they are used."""
    have = [name.rsplit(".", 1)[1] for name, present in built().items() if present]
    if not have:
        return "compiled hot paths: none (pure Python: none was built when it was installed)"
    used = "" if allowed() else f" (unused: {PURE_PYTHON_ENV} is set)"
    return f"compiled hot paths: {', '.join(have)}{used}"
