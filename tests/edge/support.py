"""Shared by the nginx edge tests: the skip marker, a paced cost model and what a timeline says about its reads."""

from __future__ import annotations

import statistics

import pytest

from latscope.lab.costmodel import CostModel
from latscope.lab.edge.errors import EdgeUnavailable
from latscope.lab.edge.nginx import find_nginx
from latscope.timeline.model import EventKind, Timeline


def _nginx_missing() -> bool:
    try:
        find_nginx()
    except EdgeUnavailable:
        return True
    return False


#: The only reason an edge test may skip: CI installs nginx-light, so there they always run.
needs_nginx = pytest.mark.skipif(
    _nginx_missing(), reason="nginx is not installed (Debian: apt-get install nginx-light); CI installs it"
)


def paced(step_ms: float) -> CostModel:
    """A token every ``step_ms`` ms and a nearly free prefill: streams with a known cadence that end quickly."""
    return CostModel.default().with_overrides(
        prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=step_ms, decode_per_seq_ms=0.0
    )


def content_events_per_read(t: Timeline) -> list[int]:
    """How many token events each read that carried any delivered, in read order."""
    counts: dict[int, int] = {}
    for event in t.events:
        if event.kind is EventKind.CONTENT:
            counts[event.read_index] = counts.get(event.read_index, 0) + 1
    return [counts[index] for index in sorted(counts)]


def largest_read_bytes(t: Timeline) -> int:
    return max(read.nbytes for read in t.reads)


def delays_ms(t: Timeline) -> list[float]:
    """Per token event: the client's read stamp minus the lab's send stamp (``truth=True``), ms, sorted."""
    return sorted(
        (event.at_ns - event.server_sent_ns) / 1e6
        for event in t.events
        if event.kind is EventKind.CONTENT and event.server_sent_ns is not None
    )


def describe(t: Timeline) -> str:
    """One line for assertion messages: what the stream looked like."""
    per_read = content_events_per_read(t)
    delays = delays_ms(t)
    connection = t.connection
    return (
        f"error={t.error.message if t.error else None} status={t.status} reads={len(t.reads)} "
        f"token events={sum(per_read)} max events/read={max(per_read, default=0)} "
        f"largest read={largest_read_bytes(t) if t.reads else 0} B "
        f"delay p50={statistics.median(delays) if delays else float('nan'):.2f} ms "
        f"max={max(delays, default=float('nan')):.2f} ms "
        f"alpn={connection.alpn if connection else None} reused={connection.reused if connection else None}"
    )
