"""The network paths the distance tests run over (tests/support/netpath.py builds them).

By default each distance test runs at :data:`DEFAULT` (20 ms each way), bounded for CI; with
``LATSCOPE_DISTANCE_MATRIX=full`` at every path of :data:`FULL_PATHS` (0, 20 and 50 ms one way, and 20 ms behind
20 Mbit/s). The lab's fault matrix picks its own bounded subset (tests/diagnose/distance_cases.py).
"""

from __future__ import annotations

import os
from typing import NamedTuple


class Path(NamedTuple):
    """A network path: one-way delay (ms) and bandwidth limit (Mbit/s each way, None for none)."""

    one_way_ms: float
    rate_mbit: float | None = None

    def __str__(self) -> str:
        limit = f"-{self.rate_mbit:g}mbit" if self.rate_mbit else ""
        return f"{self.one_way_ms:g}ms{limit}"


#: ``LATSCOPE_DISTANCE_MATRIX=full``: every case at every path (tens of minutes).
FULL = os.environ.get("LATSCOPE_DISTANCE_MATRIX") == "full"
FULL_PATHS = [Path(20.0), Path(50.0), Path(20.0, 20.0), Path(0.0)]
DEFAULT = Path(20.0)
#: The paths a test that is not the lab's matrix runs over.
PATHS = FULL_PATHS if FULL else [DEFAULT]
