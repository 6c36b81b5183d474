"""The lab's batch event log: one JSON line per scheduling event, the ground truth behind batching findings.

Each record is a :class:`BatchRecord`:

=====================  ================================================================================================
``ts_ns``              monotonic ns of the event (for a step: its simulated end; for a window close: the close)
``stage``              ``"window_close"`` (the batching window released its requests), ``"prefill"`` /
                       ``"decode"`` / ``"mixed"`` (one engine step of that kind), ``"preempt"`` (a sequence lost
                       its KV blocks)
``window_id``          number of the batching window most recently opened (0 before the first; always 0 without one)
``pending_requests``   window close: requests the window held; step/preempt: requests waiting after it was planned
``actual_batch_size``  window close: how many of them were admitted at once; step: sequences in the step;
                       preempt: sequences still running after it
``trigger_threshold``  the batching trigger (``SchedulerConfig.batch_trigger``)
``latency_us``         window close: how long the window was open; step: its simulated duration; preempt: how long
                       the preempted sequence had been running (work thrown away), µs
=====================  ================================================================================================

Records are buffered and appended to the file in blocks (and on :meth:`BatchLog.close`), so logging costs one
serialisation per event; memory stays bounded by the buffer and by the in-memory tail kept for tests.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path
from typing import IO, Literal, TypedDict

import orjson

log = logging.getLogger(__name__)

Stage = Literal["window_close", "prefill", "decode", "mixed", "preempt"]

DEFAULT_KEEP_LAST = 4096
"""Records kept in memory for inspection."""

DEFAULT_FLUSH_EVERY = 512
"""Buffered lines written in one block: large enough that file writes are rare, small enough to bound memory."""


class BatchRecord(TypedDict):
    """One batch-log line (field meanings in the module docstring)."""

    ts_ns: int
    stage: Stage
    window_id: int
    pending_requests: int
    actual_batch_size: int
    trigger_threshold: int
    latency_us: float


_Row = tuple[int, Stage, int, int, int, int, float]


def _as_record(row: _Row) -> BatchRecord:
    return {
        "ts_ns": row[0],
        "stage": row[1],
        "window_id": row[2],
        "pending_requests": row[3],
        "actual_batch_size": row[4],
        "trigger_threshold": row[5],
        "latency_us": row[6],
    }


class BatchLog:
    """Collects batch records, appends them as JSON lines to ``path`` (when given) and keeps the last few in memory.

    ``path`` None keeps records in memory only. The file is opened in append mode at the first flush.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        keep_last: int = DEFAULT_KEEP_LAST,
        flush_every: int = DEFAULT_FLUSH_EVERY,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._recent: collections.deque[_Row] = collections.deque(maxlen=max(1, keep_last))
        self._pending: list[_Row] = []
        self._flush_every = max(1, flush_every)
        self._file: IO[bytes] | None = None
        self._closed = False
        self.written = 0
        """Records written to the file so far."""

    def record(
        self,
        stage: Stage,
        *,
        ts_ns: int,
        window_id: int,
        pending_requests: int,
        actual_batch_size: int,
        trigger_threshold: int,
        latency_us: float,
    ) -> None:
        """Add one record (see the module docstring for the fields)."""
        # A tuple now, a dict and a JSON line only when read or flushed: logging sits on the engine's hot path.
        row = (ts_ns, stage, window_id, pending_requests, actual_batch_size, trigger_threshold, latency_us)
        self._recent.append(row)
        if self.path is None or self._closed:
            return
        self._pending.append(row)
        if len(self._pending) >= self._flush_every:
            self.flush()

    @property
    def records(self) -> list[BatchRecord]:
        """The most recent records, oldest first."""
        return [_as_record(row) for row in self._recent]

    def of_stage(self, stage: Stage) -> list[BatchRecord]:
        """The most recent records of one stage, oldest first."""
        return [_as_record(row) for row in self._recent if row[1] == stage]

    def flush(self) -> None:
        """Write the buffered lines to the file."""
        if not self._pending or self.path is None:
            return
        rows = self._pending
        self._pending = []
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("ab")
            self._file.write(b"".join(orjson.dumps(_as_record(row)) + b"\n" for row in rows))
            self._file.flush()
        except OSError:
            # A full disk or a vanished directory must not stop the engine: keep logging in memory only.
            log.exception("batch log: cannot write %s; keeping records in memory only", self.path)
            self._closed = True
            return
        self.written += len(rows)

    def close(self) -> None:
        """Flush and close the file; later records are kept in memory only. Idempotent."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
        self._closed = True
