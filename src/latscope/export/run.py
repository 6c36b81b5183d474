"""A bench run directory's requests as spans: read from ``requests.parquet`` after the run, in the driver.

The load workers do no export work: with ``--otlp`` they only send a ``traceparent`` with each request (the ids come
from a buffer of random bytes drawn for 128 requests at a time) and write its trace and span ids into the
``requests`` table, in the writer thread with the rest of the row. Here the rows become spans through
:func:`latscope.export.spans.row_spans`.
"""

from __future__ import annotations

from pathlib import Path

from latscope.dialects import get_dialect
from latscope.export.spans import Span, row_spans
from latscope.runs.storage import read_requests, read_run_json


def run_spans(run_dir: Path, *, clock_offset_ns: int) -> list[Span]:
    """The spans of every request of the run in ``run_dir`` (warm-up requests included: they are marked
    ``latscope.bench.warmup``), in the table's order."""
    data = read_run_json(run_dir)
    config = data.get("config") or {}
    dialect = config.get("dialect")
    url = str(config.get("url") or "")
    if dialect is not None:
        speaks = get_dialect(dialect)
        url = url.rstrip("/") + speaks.build_request(data.get("model") or "", "", 1).path
    spans: list[Span] = []
    for row in read_requests(run_dir).to_pylist():
        spans += row_spans(row, url=url, model=data.get("model"), dialect=dialect, clock_offset_ns=clock_offset_ns)
    return spans
