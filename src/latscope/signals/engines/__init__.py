"""Per-server-family Prometheus adapters: a registry from family name to adapter, and auto-detection.

Each module is named after the server it reads and holds its metric-name table (``METRICS``), and a
``window_stats(delta, snapshots)`` adapter of its own when the names alone do not say everything (TGI's batch
timings, llama.cpp's engine-time counters, Triton's microsecond counters); the others are read by name.
:func:`window_stats` is the entry point: two scrapes (and any taken in between, for gauges) in,
:class:`~latscope.signals.windowstats.ServerWindowStats` out.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from latscope.signals.engines import lab, llamacpp, sglang, tgi, triton, vllm
from latscope.signals.headers import warn
from latscope.signals.prometheus import Snapshot, delta
from latscope.signals.windowstats import Adapter, ServerWindowStats, stats_from_names

# Detection order: the lab first (it may sit in front of a real engine and re-export its metrics), then the engines.
ADAPTERS: dict[str, tuple[tuple[str, ...], Adapter]] = {
    "lab": (lab.METRICS.detect_prefixes, partial(stats_from_names, lab.METRICS)),
    "vllm": (vllm.METRICS.detect_prefixes, partial(stats_from_names, vllm.METRICS)),
    "sglang": (sglang.METRICS.detect_prefixes, partial(stats_from_names, sglang.METRICS)),
    "tgi": (tgi.METRICS.detect_prefixes, tgi.window_stats),
    "llamacpp": (llamacpp.METRICS.detect_prefixes, llamacpp.window_stats),
    "triton": (triton.METRICS.detect_prefixes, triton.window_stats),
}


def register_adapter(family: str, detect_prefixes: tuple[str, ...], adapter: Adapter) -> None:
    """Add (or replace) the adapter for a server family; it is detected by any of ``detect_prefixes``."""
    ADAPTERS[family] = (detect_prefixes, adapter)


def detect_family(snapshot: Snapshot) -> str | None:
    """The first registered family whose metric-name prefix appears in ``snapshot``, or None."""
    for family, (prefixes, _) in ADAPTERS.items():
        if any(snapshot.has_prefix(prefix) for prefix in prefixes):
            return family
    return None


def window_stats(
    before: Snapshot,
    after: Snapshot,
    *,
    during: Sequence[Snapshot] = (),
    family: str | None = None,
    warnings: list[str] | None = None,
) -> ServerWindowStats | None:
    """What the server's metrics say about the window between two scrapes.

    Counters and histograms come from ``delta(before, after)``; gauges from ``before``, ``during`` (scrapes taken
    inside the window, in order) and ``after``. ``family`` forces an adapter; otherwise it is detected from the
    metric names. Returns None (with a warning) when no adapter recognises the metrics.
    """
    chosen = family or detect_family(after) or detect_family(before)
    if chosen is None or chosen not in ADAPTERS:
        warn(warnings, f"prometheus: no adapter for these metrics (family={chosen!r})")
        return None
    window = delta(before, after, warnings=warnings)
    return ADAPTERS[chosen][1](window, [before, *during, after])


__all__ = ["ADAPTERS", "detect_family", "register_adapter", "window_stats"]
