"""The run directory: ``run.json``, ``requests.parquet``, ``events.parquet`` — read directly by pandas and DuckDB.

::

    RUN/
      run.json           schema "latscope.bench/1": config, environment, client health, per-step summaries
      requests.parquet   one row per request (latscope.runs.records.REQUEST_SCHEMA)
      events.parquet     one row per stream event (latscope.runs.records.EVENT_SCHEMA); join on (step, request_id)

While a run is in progress each worker streams its rows to its own part files under ``RUN/parts/`` with
:class:`PartWriter` (batches converted on the event loop a slice at a time and written as row groups by a background
thread, so memory stays at about one batch and the loop never waits long for conversion or compression).
:func:`merge_parts` then concatenates the parts into the two final files, streaming the events batch by batch, and
removes ``parts/``.

Example::

    pandas.read_parquet("RUN/requests.parquet").query("not warmup").ttft_ms.quantile(0.99)
    duckdb.sql("SELECT quantile_cont(gap_ms, 0.99) FROM 'RUN/events.parquet' WHERE gap_ms IS NOT NULL")
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from latscope.runs.records import (
    EVENT_SCHEMA,
    REQUEST_SCHEMA,
    RequestContext,
    RequestDigest,
    Steps,
    build_steps,
    build_tables,
    digest,
    prime_conversions,
)
from latscope.timeline.model import Timeline
from latscope.timeline.redact import scrub_data

#: Receives each converted batch instead of the part files: ``(requests, events)`` tables of one row group each.
BatchSink = Callable[[pa.Table, pa.Table], None]

RUN_SCHEMA = "latscope.bench/1"
RUN_JSON = "run.json"
REQUESTS_FILE = "requests.parquet"
EVENTS_FILE = "events.parquet"
PARTS_DIR = "parts"

#: Rows per row group of the merged ``events.parquet``. 64k events ≈ 2.5 MB of buffers: large enough for good
#: compression and fast scans.
EVENT_BATCH_ROWS = 65_536

#: Events (or requests, whichever comes first) a worker's :class:`PartWriter` converts as one batch, on its event
#: loop. A batch's whole-batch steps (the gap sort, the per-request reductions, the table of events) then take about
#: 0.2 ms each here, where 64k events took 2-4 ms; :func:`merge_parts` gathers the parts' small row groups into
#: ``EVENT_BATCH_ROWS`` again.
WRITER_EVENT_ROWS = 4_096
WRITER_REQUEST_ROWS = 512

#: Events (or requests) of converted batches a :class:`PartWriter` gathers before it writes them as one row group of
#: each part file. Every row group costs a header, a page and a compression call per column (68 request columns): 1,200
#: requests cost 24 ms to write in 30 row groups and 2 ms in two, and the 123k events 13 ms against 8, on top of the
#: write and seek calls. Converted, 64k events are ~3 MB of Arrow buffers.
PART_GROUP_EVENTS = 65_536
PART_GROUP_REQUESTS = 8_192

#: zstd: about half the size of snappy on these tables at similar speed; pandas, DuckDB and polars all read it.
COMPRESSION = "zstd"

#: How :func:`merge_parts` writes the two final files: :data:`COMPRESSION`, with dictionary pages only for the
#: columns of a few distinct values (the event ``kind``; the request columns that are text: class, sources, error
#: kinds, …). Timestamps, durations and ids are near-unique: a dictionary of them is as large as the column, and
#: building it took a third of the merge (events 52 → 34 ms per 120k rows, and the file 14 % smaller, measured on the
#: parts of a 20k events/s run). Column statistics stay, for readers that skip row groups with them.
FINAL_EVENT_OPTIONS: dict[str, Any] = {"compression": COMPRESSION, "use_dictionary": ["kind"]}
FINAL_REQUEST_OPTIONS: dict[str, Any] = {
    "compression": COMPRESSION,
    "use_dictionary": [f.name for f in REQUEST_SCHEMA if pa.types.is_string(f.type)],
}

#: How the part files are written while a run is in progress: LZ4, no column statistics, and dictionary pages for
#: the event ``kind`` alone (without them it would be read back with a dictionary of the kinds present, not the
#: writer's). They are read once, by :func:`merge_parts`, which writes the final files with :data:`COMPRESSION`.
#: Written this way a batch costs about a third of the CPU that zstd, dictionaries and statistics cost
#: (benchmarks/part_write.py: 0.09 against 0.26 µs per event), CPU taken from the measuring process.
PART_WRITE_OPTIONS: dict[str, Any] = {"compression": "lz4", "use_dictionary": ["kind"], "write_statistics": False}


class RunFormatError(ValueError):
    """A run directory is missing a file or holds one written by something else."""


def part_paths(run_dir: Path, step: int, worker: int) -> tuple[Path, Path]:
    """``(requests_part, events_part)`` for one worker in one step."""
    base = run_dir / PARTS_DIR / f"step{step:04d}-w{worker:03d}"
    return base.with_suffix(".requests.parquet"), base.with_suffix(".events.parquet")


#: How long the writer converts on the event loop before it hands the loop back for a turn (reads, timers, the
#: dispatcher), ns. A slice ends after the step that crosses it, so the loop waits at most this plus one step (one
#: request's columns: tens of µs).
CONVERT_SLICE_NS = 50_000


class PartWriter:
    """Streams one worker's rows of one step to its two part files.

    :meth:`add` keeps the finished timeline (and returns a constant-time digest); every ``event_batch_rows`` events
    or ``request_batch_rows`` requests the batch is converted (:func:`~latscope.runs.records.build_steps`), and
    converted batches are written as one row group of each file once they hold ``group_events`` events or
    ``group_requests`` requests (:data:`PART_GROUP_EVENTS`). Memory stays at about one batch of timelines and one
    row group of converted columns.

    Conversion runs on the thread that adds. Called from a running event loop, a task converts a slice at a time
    (:data:`CONVERT_SLICE_NS`, longer while batches queue up) and lets the loop run a turn in between, so a read is
    stamped and an arrival sent at most a slice late. It never runs in a second thread: a thread executing Python
    holds the GIL, and the loop's thread, woken by a read or a timer, then waits the interpreter's switch interval
    (5 ms) for it — every read of the step stamped up to 5 ms late while a batch converts (measured: dispatch lag
    p99 0.002 → 1 ms and 5 ms ticks at 1,000 requests/s with a batch converted every second). The Parquet encoding
    and compression, which release the GIL, run in one background thread. ``threaded=False`` converts and writes
    inline (tests, tiny runs); so does a writer used outside an event loop, but it still writes in the thread.

    With ``sink`` no file is written: each converted batch goes to ``sink`` (a Ray actor hands them to the driver,
    which writes the part files on its side), and ``flush_interval_s`` also ends a batch that old, so a worker that
    dies loses only its last interval of records.
    """

    def __init__(
        self,
        run_dir: Path,
        step: int,
        worker: int,
        *,
        event_batch_rows: int = WRITER_EVENT_ROWS,
        request_batch_rows: int = WRITER_REQUEST_ROWS,
        threaded: bool = True,
        sink: BatchSink | None = None,
        flush_interval_s: float | None = None,
        group_events: int = PART_GROUP_EVENTS,
        group_requests: int = PART_GROUP_REQUESTS,
    ) -> None:
        prime_conversions()  # one-time lazy imports now, not in the middle of the measured step
        self.requests_path, self.events_path = part_paths(run_dir, step, worker)
        self._sink = sink
        self._flush_interval_ns = None if flush_interval_s is None else int(flush_interval_s * 1e9)
        self._last_flush_ns = time.monotonic_ns()
        self._batch: list[tuple[Timeline, RequestContext]] = []
        self._batch_events = 0
        self._event_batch_rows = event_batch_rows
        self._request_batch_rows = request_batch_rows
        self._requests_writer: pq.ParquetWriter | None = None
        self._events_writer: pq.ParquetWriter | None = None
        if sink is None:
            self.requests_path.parent.mkdir(parents=True, exist_ok=True)
            self._requests_writer = open_part(self.requests_path, REQUEST_SCHEMA)
            self._events_writer = open_part(self.events_path, EVENT_SCHEMA)
        self._threaded = threaded
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="latscope-parquet")
            if threaded and sink is None
            else None
        )
        self._pending: list[Future[None]] = []
        self._group: list[tuple[pa.Table, pa.Table]] = []  #: converted batches not written yet
        self._group_events = self._group_requests = 0
        self._group_limits = (group_events, group_requests)
        self._queue: deque[list[tuple[Timeline, RequestContext]]] = deque()  #: batches waiting for the converter
        self._steps: Steps | None = None  #: the conversion of the batch the converter is part way through
        self._converting: list[tuple[Timeline, RequestContext]] = []  #: that batch
        self._freeing: list[tuple[Timeline, RequestContext]] = []  #: a converted batch, released a request a step
        self._task: asyncio.Task[None] | None = None
        self._failed: Exception | None = None  #: what made the converter's task stop
        self.requests_written = 0
        self.events_written = 0
        self._closed = False

    @property
    def converting(self) -> bool:
        """True while batches wait for the converter or are part way through it (their timelines included), until
        a batch fails."""
        return self._failed is None and bool(self._queue or self._steps is not None or self._freeing)

    @property
    def buffered_events(self) -> int:
        """Events held in the current batch (not yet handed to the converter)."""
        return self._batch_events

    def add(self, t: Timeline, ctx: RequestContext) -> RequestDigest:
        """Record one finished request (its row and its events); return its digest. Raises what made an earlier
        batch fail to convert or write (a disk error surfaces now, not at the end of a long run)."""
        if self._failed is not None:
            raise self._failed
        self._batch.append((t, ctx))
        self._batch_events += len(t.events)
        full = self._batch_events >= self._event_batch_rows or len(self._batch) >= self._request_batch_rows
        if full or self._batch_is_old():
            self._flush()
        return digest(t, ctx)

    def _batch_is_old(self) -> bool:
        interval = self._flush_interval_ns
        return interval is not None and time.monotonic_ns() - self._last_flush_ns >= interval

    def _flush(self) -> None:
        self._last_flush_ns = time.monotonic_ns()
        batch, self._batch, self._batch_events = self._batch, [], 0
        if not batch:
            return
        self.requests_written += len(batch)
        self.events_written += sum(len(t.events) for t, _ in batch)
        loop = _running_loop() if self._threaded and not self._closed else None
        if loop is None:
            self._emit(build_tables(batch))
            return
        self._queue.append(batch)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._convert(), name="latscope-convert")

    async def _convert(self) -> None:
        """Convert the queued batches a slice per event-loop turn."""
        try:
            while self.converting:
                # a queue that grows (a loop too busy to give the converter its slices) gets longer slices, so
                # memory stays bounded at the price of longer waits
                budget = CONVERT_SLICE_NS * (1 + len(self._queue))
                began = time.monotonic_ns()
                while self._step() and time.monotonic_ns() - began < budget:
                    pass
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            return  # close() finishes the work inline
        except Exception as exc:  # a disk error, a sink that failed: the next add() or close() raises it
            self._failed = exc

    def _step(self) -> bool:
        """Run one step of the conversion (emitting a batch that it finishes); False when there is nothing left."""
        if self._steps is None:
            if self._freeing:
                # a timeline is hundreds of objects: a whole batch released at once is ~10 ms of deallocation
                self._freeing.pop()
                return True
            if not self._queue:
                return False
            self._converting = self._queue.popleft()
            self._steps = build_steps(self._converting)
        try:
            next(self._steps)
        except StopIteration as done:
            self._steps = None
            self._freeing, self._converting = self._converting, []
            self._emit(done.value)
        return True

    def _finish_conversions(self) -> None:
        """Convert what the converter still holds, inline."""
        while self._step():
            pass

    def _emit(self, tables: tuple[pa.Table, pa.Table]) -> None:
        """Hand a converted batch to the sink, or gather it for the next row group of the part files."""
        requests, events = tables
        if self._sink is not None:
            self._sink(requests, events)
            return
        self._group.append(tables)
        self._group_events += events.num_rows
        self._group_requests += requests.num_rows
        max_events, max_requests = self._group_limits
        if self._group_events >= max_events or self._group_requests >= max_requests:
            self._write_group()

    def _write_group(self) -> None:
        """Write the gathered batches as one row group of each file (in the background thread when there is one)."""
        if not self._group:
            return
        group, self._group, self._group_events, self._group_requests = self._group, [], 0, 0
        # chunked, not copied: the writer makes one row group of the chunks
        requests = pa.concat_tables([r for r, _ in group])
        events = pa.concat_tables([e for _, e in group])
        if self._pool is None:
            self._write(requests, events)
            return
        still_running: list[Future[None]] = []
        for fut in self._pending:
            if fut.done():
                fut.result()  # surface a disk error now rather than at the end of a long run
            else:
                still_running.append(fut)
        self._pending = still_running
        self._pending.append(self._pool.submit(self._write, requests, events))

    def _write(self, requests: pa.Table, events: pa.Table) -> None:
        assert self._requests_writer is not None and self._events_writer is not None
        self._requests_writer.write_table(requests)
        self._events_writer.write_table(events)

    def close(self) -> None:
        """Convert and write what is buffered, wait for the writer thread, close both files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._task is not None:
                self._task.cancel()
            if self._failed is not None:
                raise self._failed
            self._finish_conversions()  # the batches queued on the loop go first: row groups keep their order
            self._flush()
            self._write_group()
            for fut in self._pending:
                fut.result()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self._requests_writer is not None and self._events_writer is not None:
                self._requests_writer.close()
                self._events_writer.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def open_part(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    """A writer of one part file (:data:`PART_WRITE_OPTIONS`)."""
    return pq.ParquetWriter(path, schema, **PART_WRITE_OPTIONS)


def merge_parts(run_dir: Path) -> tuple[int, int]:
    """Merge ``RUN/parts/*`` into ``requests.parquet`` (sorted by step, request_id) and ``events.parquet``
    (streamed batch by batch); remove ``parts/``. Returns ``(requests, events)`` row counts. With no parts the two
    files are written empty, so a run directory always has both."""
    parts = run_dir / PARTS_DIR
    request_parts = sorted(parts.glob("*.requests.parquet")) if parts.exists() else []
    event_parts = sorted(parts.glob("*.events.parquet")) if parts.exists() else []

    tables = [_read_part(p, REQUEST_SCHEMA) for p in request_parts]
    requests = pa.concat_tables(tables) if tables else REQUEST_SCHEMA.empty_table()
    if requests.num_rows:
        requests = requests.sort_by([("step", "ascending"), ("request_id", "ascending")])
    tmp = run_dir / (REQUESTS_FILE + ".tmp")
    pq.write_table(requests, tmp, row_group_size=256 * 1024, **FINAL_REQUEST_OPTIONS)
    os.replace(tmp, run_dir / REQUESTS_FILE)

    events = 0
    tmp = run_dir / (EVENTS_FILE + ".tmp")
    with pq.ParquetWriter(tmp, EVENT_SCHEMA, **FINAL_EVENT_OPTIONS) as writer:
        for path in event_parts:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=EVENT_BATCH_ROWS):
                writer.write_batch(batch.cast(EVENT_SCHEMA) if batch.schema != EVENT_SCHEMA else batch)
                events += batch.num_rows
    os.replace(tmp, run_dir / EVENTS_FILE)
    shutil.rmtree(parts, ignore_errors=True)
    return requests.num_rows, events


def _read_part(path: Path, schema: pa.Schema) -> pa.Table:
    """A whole part file, as ``schema``. Read with the file reader on this thread: on a part of many small row
    groups the dataset reader behind ``pq.read_table``, with its thread pool, took six times as long (43 against
    7 ms for 1,200 requests in 30 row groups)."""
    table = pq.ParquetFile(path).read(use_threads=False)
    return table if table.schema == schema else table.cast(schema)


def write_run_json(run_dir: Path, data: dict[str, Any]) -> Path:
    """Write ``run.json`` atomically (``schema`` added); return its path."""
    payload = scrub_data({"schema": RUN_SCHEMA, **data})
    path = run_dir / RUN_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)
    return path


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """Read ``RUN/run.json`` (``RUN`` may also be the file itself); raises :class:`RunFormatError`."""
    path = run_dir if run_dir.is_file() else run_dir / RUN_JSON
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise RunFormatError(f"{path}: not found (is {run_dir} a latscope bench run directory?)") from None
    except orjson.JSONDecodeError as exc:
        raise RunFormatError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise RunFormatError(f"{path}: expected schema {RUN_SCHEMA!r}, got {got!r}")
    return data


def read_requests(run_dir: Path) -> pa.Table:
    """The ``requests`` table of a run."""
    return pq.read_table(run_dir / REQUESTS_FILE)


def iter_event_batches(run_dir: Path, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the ``events`` table (only ``columns`` when given), without loading the whole file."""
    path = run_dir / EVENTS_FILE
    if not path.exists():
        return iter(())
    batches: Iterator[pa.RecordBatch] = pq.ParquetFile(path).iter_batches(
        batch_size=EVENT_BATCH_ROWS * 4, columns=columns
    )
    return batches
