"""Percentiles of short lists of plain floats, exact and in pure Python: one implementation for every layer.

It lives with the timeline's metrics, the lowest layer that takes a percentile (a request's read delays); the checks
and the reports use it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal


def percentile(values: Sequence[float], q: float, *, method: Literal["linear", "nearest"] = "linear") -> float | None:
    """The ``q``-th percentile (0–100) of ``values``, or None for no values.

    ``"linear"`` interpolates between the two order statistics around the position ``(n − 1) · q / 100`` (numpy's
    default); ``"nearest"`` is the order statistic nearest that position, ties to the even one (numpy's
    ``method="nearest"``), a value that occurred. Raises ValueError for ``q`` outside 0–100.
    """
    if not values:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    if method == "nearest":
        return ordered[min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))]
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
