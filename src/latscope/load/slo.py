"""Service-level objectives and goodput.

``--slo ttft=500ms,tpot=50ms,e2e=10s`` sets one upper bound per metric. A request is *good* when it succeeded and
every bounded metric is at or under its bound; goodput is good requests per second (and their share of all
requests). Metrics a request legitimately lacks — ``tpot`` and ``itl`` of a one-token answer — do not fail it; a
missing ``ttft``/``ttfb``/``e2e`` means the request failed and it is not good anyway.

Bounds accept ``us``, ``ms`` (the default unit) and ``s``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: SLO key → the per-request column (in ms) it bounds. ``itl`` bounds a request's worst gap, the one a reader sees.
SLO_COLUMNS: dict[str, str] = {
    "ttft": "ttft_ms",
    "ttfb": "ttfb_ms",
    "tpot": "tpot_ms",
    "itl": "itl_max_ms",
    "e2e": "e2e_ms",
    "setup": "setup_ms",
    "client_queue": "client_queue_ms",
}

#: Metrics whose absence does not fail a request (a one-token answer has no inter-token gap).
OPTIONAL_METRICS = frozenset({"tpot", "itl", "setup", "client_queue"})

_UNITS_MS = {"us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0}
_BOUND = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(us|µs|ms|s)?\s*$", re.IGNORECASE)


class SloSpecError(ValueError):
    """An SLO specification could not be read."""


@dataclass(frozen=True, slots=True)
class Slo:
    """Upper bounds in ms, by metric key (see :data:`SLO_COLUMNS`)."""

    bounds_ms: tuple[tuple[str, float], ...]

    def __str__(self) -> str:
        return ",".join(f"{k}={v:g}ms" for k, v in self.bounds_ms)

    def to_dict(self) -> dict[str, float]:
        """``{metric: bound_ms}``."""
        return dict(self.bounds_ms)

    @classmethod
    def from_dict(cls, data: Mapping[str, float]) -> Slo:
        """Inverse of :meth:`to_dict`."""
        for key in data:
            if key not in SLO_COLUMNS:
                raise SloSpecError(f"unknown SLO metric {key!r}; known: {', '.join(SLO_COLUMNS)}")
        return cls(tuple((k, float(v)) for k, v in data.items()))

    def met(self, columns: Mapping[str, npt.NDArray[Any]], ok: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Per request: True when ``ok`` and every bound holds. ``columns`` maps column names to float arrays
        (NaN = the metric is missing for that request)."""
        good = ok.astype(bool, copy=True)
        for key, bound in self.bounds_ms:
            values = np.asarray(columns[SLO_COLUMNS[key]], dtype=np.float64)
            missing = np.isnan(values)
            within = np.where(missing, key in OPTIONAL_METRICS, values <= bound)
            good &= within
        return good


def parse_bound_ms(text: str) -> float:
    """``"500ms"`` → 500.0, ``"10s"`` → 10000.0, ``"250us"`` → 0.25, ``"40"`` → 40.0 (ms)."""
    match = _BOUND.match(text)
    if match is None:
        raise SloSpecError(f"cannot read duration {text!r}; write e.g. 500ms, 10s or 250us")
    value, unit = match.groups()
    return float(value) * _UNITS_MS[(unit or "ms").lower()]


def parse_slo(text: str) -> Slo:
    """Parse ``ttft=500ms,tpot=50ms,e2e=10s``."""
    bounds: dict[str, float] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq:
            raise SloSpecError(f"SLO item {item!r} needs METRIC=DURATION, e.g. ttft=500ms")
        if key not in SLO_COLUMNS:
            raise SloSpecError(f"unknown SLO metric {key!r}; known: {', '.join(SLO_COLUMNS)}")
        bounds[key] = parse_bound_ms(value)
    if not bounds:
        raise SloSpecError("an SLO needs at least one METRIC=DURATION")
    return Slo(tuple(bounds.items()))
