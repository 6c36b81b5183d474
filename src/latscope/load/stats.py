"""Percentile summaries of latency samples.

Percentiles use linear interpolation between order statistics (numpy's and pandas' default), so a user who reloads
``requests.parquet`` into pandas gets the same numbers as the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: The percentiles every distribution reports (the ones serving SLOs are written against).
PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True, slots=True)
class Dist:
    """Summary of one metric's samples. The unit is the metric's (``*_ms`` metrics: ms; token counts: tokens)."""

    count: int
    mean: float
    min: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Dist:
        """Inverse of :meth:`to_dict`."""
        return cls(
            count=int(data["count"]),
            **{k: float(data[k]) for k in ("mean", "min", "p50", "p90", "p95", "p99", "max")},
        )


def as_array(values: npt.NDArray[Any] | Iterable[float | None]) -> npt.NDArray[np.float64]:
    """Float64 array of ``values`` with None and NaN removed."""
    if isinstance(values, np.ndarray):
        arr = values.astype(np.float64, copy=False)
    else:
        arr = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return arr[~np.isnan(arr)]


def describe(values: npt.NDArray[Any] | Sequence[float | None]) -> Dist | None:
    """The :class:`Dist` of ``values`` (None/NaN ignored), or None when no value remains."""
    arr = as_array(values)
    if arr.size == 0:
        return None
    p50, p90, p95, p99 = (float(v) for v in np.percentile(arr, PERCENTILES))
    return Dist(
        count=int(arr.size),
        mean=float(arr.mean()),
        min=float(arr.min()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        max=float(arr.max()),
    )
