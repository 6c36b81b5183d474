"""What stamped a run's reads, and the client's own scheduling delay measured with kernel stamps (``run.json``'s
``stamps`` section).

With ``--stamps kernel`` every read carries two stamps: the kernel's receive stamp (the one the run's times use) and
the user-space stamp of the moment the event loop read it. Their difference is how long data waited for the client:
the client's own scheduling delay, measured rather than estimated. ``read_delay_ms`` summarises it over the events
(each event counts the delay of the read that carried it); ``requests_by_source`` says which connections really had
kernel stamps, so a run that asked for them and fell back (a platform without ``SO_TIMESTAMPNS``) says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

#: what a kernel stamp is, as recorded in run.json
KERNEL_STAMP_SEMANTICS = (
    "kernel software receive stamp (SO_TIMESTAMPNS) of the last TCP segment a read returned, on CLOCK_MONOTONIC"
)


def stamps_summary(
    requested: str,
    requests: pa.Table,
    read_delays: Iterator[pa.RecordBatch] | Iterable[pa.RecordBatch],
    clocks: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``stamps`` section of ``run.json``: ``requested`` (the ``--stamps`` setting), the requests per stamp
    source, whether kernel stamps were asked for and not had, the read delay over the events (batches holding the
    events' ``read_delay_ms`` column) and the workers' clock offset reports (``clocks``)."""
    by_source: dict[str, int] = {}
    if "stamps" in requests.column_names:
        for source in requests.column("stamps").to_pylist():
            key = source if source is not None else "none"
            by_source[key] = by_source.get(key, 0) + 1
    parts = [
        batch.column("read_delay_ms").to_numpy(zero_copy_only=False)
        for batch in read_delays
        if "read_delay_ms" in batch.schema.names
    ]
    delays = np.concatenate(parts) if parts else np.empty(0)
    delays = delays[~np.isnan(delays)]
    out: dict[str, Any] = {
        "requested": requested,
        "requests_by_source": by_source,
        "fell_back": requested == "kernel" and by_source.get("user", 0) > 0,
        "kernel_semantics": KERNEL_STAMP_SEMANTICS if by_source.get("kernel") else None,
        "read_delay_ms": None,
        "clock": clocks,
    }
    if delays.size:
        p50, p90, p99, top = np.percentile(delays, (50, 90, 99, 100))
        out["read_delay_ms"] = {
            "events": int(delays.size),
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "max": float(top),
        }
    return out


def describe(section: dict[str, Any]) -> str:
    """One line for the terminal: the stamp source and the measured scheduling delay."""
    counts = section.get("requests_by_source") or {}
    total = sum(counts.values())
    kernel = counts.get("kernel", 0)
    text = f"stamps: {section.get('requested')} asked; kernel stamps on {kernel}/{total} requests"
    if section.get("fell_back"):
        text += " (the rest fell back to user-space stamps)"
    delay = section.get("read_delay_ms")
    if delay:
        text += (
            f"; the client's own scheduling delay (user-space − kernel stamp, per event's read): "
            f"p50 {delay['p50']:.3f} ms, p99 {delay['p99']:.3f} ms, max {delay['max']:.3f} ms"
        )
    return text
