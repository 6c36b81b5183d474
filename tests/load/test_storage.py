"""The run directory's Parquet tables: what each row holds, streaming in row groups, pandas round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from latscope.runs.records import EVENT_SCHEMA, REQUEST_SCHEMA, RequestContext
from latscope.runs.storage import (
    COMPRESSION,
    EVENTS_FILE,
    PART_WRITE_OPTIONS,
    PARTS_DIR,
    REQUESTS_FILE,
    PartWriter,
    RunFormatError,
    merge_parts,
    read_run_json,
    write_run_json,
)
from latscope.timeline.model import EventKind, Phase, Usage
from tests.support.load_timelines import MS, make_timeline

START = 5_000 * MS


def ctx(request_id: int, *, warmup: bool = False, step: int = 0, worker: int = 0) -> RequestContext:
    return RequestContext(
        step=step,
        request_id=request_id,
        worker=worker,
        class_name="chat",
        warmup=warmup,
        step_start_ns=START,
        schedule_lag_ns=20_000,
        planned_prompt_tokens=128,
        max_tokens=16,
    )


@pytest.mark.parametrize("threaded", [True, False])
def test_requests_and_events_round_trip_through_pandas(tmp_path: Path, threaded: bool) -> None:
    writer = PartWriter(tmp_path, 0, 0, threaded=threaded)
    ok = make_timeline(
        start_ns=START + 10 * MS,
        scheduled_ns=START + 9 * MS,
        ttft_ms=40,
        gaps_ms=[5, 0, 7],
        coalesced=[2],
        usage=Usage(prompt_tokens=120, completion_tokens=4),
        server_delay_ms=0.25,
    )
    failed = make_timeline(start_ns=START + 20 * MS, error=(Phase.STREAM, "reset", None))
    writer.add(ok, ctx(0))
    writer.add(failed, ctx(1))
    writer.close()
    assert merge_parts(tmp_path) == (2, ok.events.__len__() + failed.events.__len__())
    assert not (tmp_path / PARTS_DIR).exists()

    requests = pd.read_parquet(tmp_path / REQUESTS_FILE)
    assert list(requests.columns) == REQUEST_SCHEMA.names
    first = requests.iloc[0]
    assert bool(first.ok) and first["class"] == "chat"
    assert first.scheduled_at_ms == pytest.approx(9.0)
    assert first.started_at_ms == pytest.approx(10.0)
    assert first.client_queue_ms == pytest.approx(1.0)
    assert first.schedule_lag_ms == pytest.approx(0.02)
    assert first.ttft_ms == pytest.approx(40.0)
    assert first.itl_count == 3 and first.itl_max_ms == pytest.approx(7.0)
    assert (first.prompt_tokens, first.prompt_tokens_source) == (120, "usage")
    assert (first.output_tokens, first.output_tokens_source) == (4, "usage")
    assert first.coalesced_events == 2  # the coalesced token, and [DONE] in the finish chunk's read
    second = requests.iloc[1]
    assert not second.ok and second.error_phase == "stream" and second.error_kind == "reset"
    assert (second.prompt_tokens, second.prompt_tokens_source) == (128, "planned")
    assert second.output_tokens_source == "counted"
    assert np.isnan(second.e2e_ms) or second.e2e_ms > 0
    assert pd.isna(first.dns_ms)  # a missing phase is NULL, never 0

    events = pd.read_parquet(tmp_path / EVENTS_FILE)
    assert list(events.columns) == EVENT_SCHEMA.names
    mine = events[events.request_id == 0].reset_index(drop=True)
    assert list(mine.kind.astype(str)) == ["role", "content", "content", "content", "content", "finish", "done"]
    gaps = mine.gap_ms[mine.kind == "content"].tolist()
    assert np.isnan(gaps[0]) and gaps[1:] == pytest.approx([5.0, 0.0, 7.0])
    assert mine.coalesced.tolist() == [False, False, False, True, False, False, True]
    assert mine.delay_ms.dropna().tolist() == pytest.approx([0.25] * 7)
    assert mine.at_ms[1] == pytest.approx(40.0)


def test_events_stream_in_row_groups_of_the_batch_size(tmp_path: Path) -> None:
    writer = PartWriter(tmp_path, 0, 0, event_batch_rows=50, request_batch_rows=7, group_events=200)
    for i in range(40):
        writer.add(make_timeline(start_ns=START + i * MS, gaps_ms=[1.0] * 9), ctx(i))
        # memory stays at one batch: the buffer is written out whenever it is full
        assert writer.buffered_events < 50 + 14
    writer.close()
    events_part = pq.ParquetFile(writer.events_path).metadata
    # converted batches of ~50 events are gathered into row groups of at least 200 (the last one: what is left)
    sizes = [events_part.row_group(i).num_rows for i in range(events_part.num_row_groups)]
    assert len(sizes) >= 2 and all(200 <= n < 200 + 64 for n in sizes[:-1]) and sum(sizes) == 40 * 13
    requests_part = pq.ParquetFile(writer.requests_path).metadata
    assert requests_part.num_row_groups == len(sizes)
    merge_parts(tmp_path)
    assert pq.ParquetFile(tmp_path / EVENTS_FILE).metadata.num_rows == 40 * 13
    requests = pd.read_parquet(tmp_path / REQUESTS_FILE)
    assert requests.request_id.tolist() == list(range(40))


def test_parts_are_written_cheaply_and_the_merged_files_compressed(tmp_path: Path) -> None:
    writer = PartWriter(tmp_path, 0, 0, threaded=False)
    for i in range(5):
        writer.add(make_timeline(start_ns=START + i * MS), ctx(i))
    writer.close()
    part = pq.ParquetFile(writer.events_path).metadata.row_group(0)
    columns = [part.column(i) for i in range(part.num_columns)]
    assert {c.compression for c in columns} == {PART_WRITE_OPTIONS["compression"].upper()}
    assert not any(c.is_stats_set for c in columns)
    # the kind keeps its dictionary pages, so it reads back with the writer's own dictionary of every kind
    kinds = pq.read_table(writer.events_path).column("kind").chunk(0).dictionary.to_pylist()
    assert kinds == [k.value for k in EventKind]
    merge_parts(tmp_path)
    final = pq.ParquetFile(tmp_path / EVENTS_FILE).metadata.row_group(0)
    assert {final.column(i).compression for i in range(final.num_columns)} == {COMPRESSION.upper()}
    assert final.column(0).is_stats_set
    # dictionary pages for the few-valued columns only: not for times and ids, where they cost more than they save
    assert dictionary_columns(tmp_path / EVENTS_FILE) == {"kind"}
    texts = {f.name for f in REQUEST_SCHEMA if pa.types.is_string(f.type)}
    request_dictionaries = dictionary_columns(tmp_path / REQUESTS_FILE)
    assert "class" in request_dictionaries and request_dictionaries <= texts
    assert pd.read_parquet(tmp_path / EVENTS_FILE).kind.dtype == "category"


def dictionary_columns(path: Path) -> set[str]:
    group = pq.ParquetFile(path).metadata.row_group(0)
    columns = (group.column(i) for i in range(group.num_columns))
    return {c.path_in_schema for c in columns if c.dictionary_page_offset is not None}


def test_merge_orders_requests_of_several_workers_and_steps(tmp_path: Path) -> None:
    for step in (1, 0):
        for worker in (1, 0):
            w = PartWriter(tmp_path, step, worker, threaded=False)
            for rid in range(worker, 6, 2):
                w.add(make_timeline(), ctx(rid, step=step, worker=worker))
            w.close()
    merge_parts(tmp_path)
    requests = pd.read_parquet(tmp_path / REQUESTS_FILE)
    assert list(zip(requests.step, requests.request_id, strict=True)) == [(s, r) for s in (0, 1) for r in range(6)]


def test_a_run_without_requests_still_has_both_tables(tmp_path: Path) -> None:
    assert merge_parts(tmp_path) == (0, 0)
    assert pd.read_parquet(tmp_path / REQUESTS_FILE).empty
    assert pd.read_parquet(tmp_path / EVENTS_FILE).empty


def test_run_json_round_trips_and_rejects_other_files(tmp_path: Path) -> None:
    write_run_json(tmp_path, {"model": "m", "steps": []})
    assert read_run_json(tmp_path)["model"] == "m"
    (tmp_path / "run.json").write_text('{"schema": "other"}')
    with pytest.raises(RunFormatError, match="expected schema"):
        read_run_json(tmp_path)
    with pytest.raises(RunFormatError, match="not found"):
        read_run_json(tmp_path / "missing")
