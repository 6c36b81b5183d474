"""Numbers written for a person: durations in ms (one formatter, :func:`fmt_ms`, and the styles the reports use)
and rates (:func:`fmt_rate`).

Each view keeps the style its readers know (a bench table writes bare numbers, a waterfall writes units and
switches to seconds), so a style is chosen per view; the digits always shrink as the value grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class MsStyle:
    """How one kind of view writes a duration in ms.

    ``steps``: ``(bound_ms, format_spec)`` pairs in rising order; a value below a bound is written with that spec
    (the last bound is ``inf``). ``by_size``: compare ``abs(ms)`` with the bounds rather than ``ms``.
    ``sign``: ``"keep"`` writes the value as it is, ``"explicit"`` writes ``−``/``+`` before its size, ``"drop"``
    writes only its size. ``seconds_at``: at and above this (ms, compared as the steps are), the value is written
    in seconds with two decimals (None: never). ``unit`` follows a value in ms; ``missing`` stands for None.
    """

    steps: tuple[tuple[float, str], ...]
    by_size: bool = False
    sign: Literal["keep", "explicit", "drop"] = "keep"
    seconds_at: float | None = None
    unit: str = " ms"
    missing: str = "—"


SCALED = MsStyle(((10, ".2f"), (math.inf, ".1f")), by_size=True, seconds_at=1000)
"""``0.12 ms`` · ``12.3 ms`` · ``1.50 s`` · ``—``: the diagnosis report."""

TABLE = MsStyle(((1, ".3f"), (10, ".2f"), (1000, ".1f"), (math.inf, ",.0f")), unit="", missing="–")
"""``0.042`` · ``3.21`` · ``45.6`` · ``1,234`` · ``–``: bare numbers under a column headed in ms (bench, compare)."""

TRACE = MsStyle(((math.inf, ".1f"),), seconds_at=1000)
"""``45.6 ms`` · ``1.23 s`` · ``—``: one request's waterfall, its headline times."""

TRACE_FINE = MsStyle(((math.inf, ".2f"),), seconds_at=1000)
"""``45.62 ms`` · ``1.23 s`` · ``—``: one request's waterfall, its phases and terms."""

FIXED_2 = MsStyle(((math.inf, ".2f"),))
"""``45.62 ms`` · ``1234.50 ms`` · ``—``: the server's metrics."""

FIXED_1 = MsStyle(((math.inf, ".1f"),), missing="–")
"""``45.6 ms`` · ``1234.5 ms`` · ``–``: the probe's HTTP/3 lines."""

_BY_MAGNITUDE = ((10, ".2f"), (100, ".1f"), (math.inf, ".0f"))

DELTA = MsStyle(_BY_MAGNITUDE, by_size=True, sign="explicit")
"""``+1.25 ms`` · ``−12.5 ms`` · ``−312 ms``: a change."""

DELTA_BARE = MsStyle(_BY_MAGNITUDE, by_size=True, sign="explicit", unit="")
"""``+1.25`` · ``−312``: a change under a column headed in ms."""

SIZE = MsStyle(_BY_MAGNITUDE, by_size=True, sign="drop")
"""``290 ms`` for -290.2: how much, whichever way."""


def fmt_ms(ms: float | None, style: MsStyle = SCALED) -> str:
    """``ms`` (milliseconds) written in ``style``; ``style.missing`` for None."""
    if ms is None:
        return style.missing
    key = abs(ms) if style.by_size else ms
    if style.seconds_at is not None and key >= style.seconds_at:
        return f"{ms / 1000:.2f} s"
    # NaN is below no bound: it takes the last spec, as the widest values do
    spec = next((spec for bound, spec in style.steps if key < bound), style.steps[-1][1])
    if style.sign == "keep":
        return f"{ms:{spec}}{style.unit}"
    prefix = ("−" if ms < 0 else "+") if style.sign == "explicit" else ""
    return f"{prefix}{abs(ms):{spec}}{style.unit}"


def fmt_rate(value: float | None, unit: str = "/s") -> str:
    """A rate (per second unless ``unit`` says otherwise) with digits that fit its size; ``–`` for None."""
    if value is None:
        return "–"
    if value < 10:
        return f"{value:.2f}{unit}"
    if value < 1000:
        return f"{value:.1f}{unit}"
    return f"{value:,.0f}{unit}"
