"""A bench run directory written from numbers instead of a load test: ``requests.parquet`` and ``events.parquet`` in
the run's schemas, the summaries :mod:`latscope.load.summary` computes from them, and the server's gauges, so the
HTML report can be built and timed on a run of any size (``benchmarks/html_report.py``) in seconds.

Each request: a connection set up one time in eight (dns, connect), send, a server queue that grows with the step's
concurrency, a prefill, a first token, then ``output_tokens`` token events ~12 ms apart (gamma-distributed), 5 % of
them coalesced into the previous read (0 ms gap), the occasional 150 ms stall; 1 % fail with a 503."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from latscope.load.summary import summarize_run
from latscope.runs.records import EVENT_KINDS, EVENT_SCHEMA, REQUEST_SCHEMA
from latscope.runs.storage import (
    EVENTS_FILE,
    REQUESTS_FILE,
    iter_event_batches,
    read_requests,
    write_run_json,
)
from latscope.timeline.model import EventKind

WARMUP_SHARE = 0.02
FAIL_SHARE = 0.01
COALESCED_SHARE = 0.05
STALL_SHARE = 0.002


def _array(values: Any, field: pa.Field) -> pa.Array:
    if pa.types.is_floating(field.type):
        arr = np.asarray(values, dtype=np.float64)
        return pa.array(arr, type=field.type, mask=np.isnan(arr))
    return pa.array(values, type=field.type)


def write_synthetic_run(
    run_dir: Path,
    *,
    requests_per_step: int = 1000,
    concurrency: tuple[int, ...] = (1, 8),
    output_tokens: int = 64,
    seed: int = 0,
) -> Path:
    """Write a run of ``len(concurrency)`` closed-loop steps into ``run_dir``; return it."""
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    request_parts: list[pa.Table] = []
    event_parts: list[pa.Table] = []
    step_starts = []
    clock_s = 0.0
    for step, level in enumerate(concurrency):
        n = requests_per_step
        ok = rng.random(n) >= FAIL_SHARE
        new_conn = rng.random(n) < 1 / 8
        dns = np.where(new_conn, rng.uniform(0.05, 0.2, n), np.nan)
        connect = np.where(new_conn, rng.uniform(0.1, 0.4, n), np.nan)
        pool = rng.exponential(0.05, n)
        setup = pool + np.nan_to_num(dns) + np.nan_to_num(connect)
        send = rng.uniform(0.05, 0.15, n)
        parse, validate = rng.uniform(0.02, 0.1, n), rng.uniform(0.3, 0.8, n)
        queue = rng.exponential(2.0 * level, n)
        prefill = rng.normal(40.0, 3.0, n).clip(20)
        wait = parse + validate + queue + prefill + rng.uniform(0.05, 0.2, n)
        ttfb = setup + 0.05 + send + wait
        ttft = ttfb + rng.uniform(0.0, 0.3, n)
        gaps = rng.gamma(16.0, 12.0 / 16.0, (n, output_tokens - 1))
        gaps[rng.random(gaps.shape) < COALESCED_SHARE] = 0.0
        gaps[rng.random(gaps.shape) < STALL_SHARE] += 150.0
        stream = gaps.sum(axis=1)
        e2e = ttft + stream + 0.2
        started = np.cumsum(rng.exponential(e2e.mean() / level, n))
        ids = np.arange(n)
        fail = ~ok
        for arr in (ttft, e2e):
            arr[fail] = np.nan
        tokens = np.where(ok, output_tokens, 0)
        columns: dict[str, Any] = {
            "step": np.full(n, step),
            "request_id": ids,
            "worker": np.zeros(n, dtype=np.int32),
            "class": ["default"] * n,
            "warmup": ids < int(n * WARMUP_SHARE),
            "ok": ok,
            "scheduled_at_ms": started,
            "started_at_ms": started,
            "ended_at_ms": started + np.where(ok, e2e, ttfb),
            "schedule_lag_ms": np.full(n, np.nan),
            "client_queue_ms": np.zeros(n),
            "setup_ms": setup,
            "pool_ms": pool,
            "dns_ms": dns,
            "connect_ms": connect,
            "tls_ms": np.full(n, np.nan),
            "send_ms": send,
            "wait_ms": wait,
            "ttfb_ms": ttfb,
            "ttft_ms": ttft,
            "ttft_text_ms": ttft,
            "tpot_ms": np.where(ok, stream / (output_tokens - 1), np.nan),
            "e2e_ms": e2e,
            "itl_count": np.where(ok, output_tokens - 1, 0),
            "itl_p50_ms": np.where(ok, np.median(gaps, axis=1), np.nan),
            "itl_max_ms": np.where(ok, gaps.max(axis=1), np.nan),
            "prompt_tokens": np.full(n, 256),
            "prompt_tokens_source": ["planned"] * n,
            "output_tokens": tokens,
            "output_tokens_source": ["counted"] * n,
            "max_tokens": np.full(n, output_tokens),
            "events": tokens,
            "token_events": tokens,
            "reads": tokens,
            "coalesced_events": np.where(ok, (gaps == 0).sum(axis=1), 0),
            "max_events_per_read": np.where(ok, 2, 0),
            "connection_id": np.cumsum(new_conn),
            "reused": ~new_conn,
            "http_version": ["HTTP/1.1"] * n,
            "status": np.where(ok, 200, 503),
            "finish_reason": [("length" if good else None) for good in ok],
            "error_phase": [(None if good else "headers") for good in ok],
            "error_kind": [(None if good else "http-status") for good in ok],
            "error_status": [(None if good else 503) for good in ok],
            "error_message": [(None if good else "HTTP 503 Service Unavailable") for good in ok],
            "server_parse_ms": parse,
            "server_validate_ms": validate,
            "server_window_wait_ms": np.zeros(n),
            "server_queue_ms": queue,
            "server_prefill_ms": prefill,
            "server_decode_ms": np.where(ok, stream, np.nan),
            "started_ns": (started * 1e6).astype(np.int64),
            "attempts": np.ones(n, dtype=np.int32),
            "retry_ms": np.zeros(n),
            "retry_wait_ms": np.zeros(n),
            "retried": [[] for _ in range(n)],
        }
        for name in REQUEST_SCHEMA.names:
            columns.setdefault(
                name, np.full(n, np.nan) if pa.types.is_floating(REQUEST_SCHEMA.field(name).type) else [None] * n
            )
        request_parts.append(
            pa.Table.from_arrays([_array(columns[f.name], f) for f in REQUEST_SCHEMA], schema=REQUEST_SCHEMA)
        )
        # events of the successful requests: one token each
        good = np.flatnonzero(ok)
        m = good.size
        at = ttft[good, None] + np.concatenate([np.zeros((m, 1)), np.cumsum(gaps[good], axis=1)], axis=1)
        event_gaps = np.concatenate([np.full((m, 1), np.nan), gaps[good]], axis=1)
        content = EVENT_KINDS.index(EventKind.CONTENT)
        total = m * output_tokens
        kind = pa.DictionaryArray.from_arrays(
            pa.array(np.full(total, content, dtype=np.int8)), pa.array([str(k) for k in EVENT_KINDS])
        )
        events = {
            "step": np.full(total, step),
            "request_id": np.repeat(good, output_tokens),
            "seq": np.tile(np.arange(output_tokens), m),
            "at_ms": at.ravel(),
            "read_index": np.tile(np.arange(output_tokens), m),
            "tokens": np.ones(total, dtype=np.int32),
            "text_chars": np.full(total, 4),
            "gap_ms": event_gaps.ravel(),
            "coalesced": (event_gaps == 0).ravel(),
            "delay_ms": np.full(total, np.nan),
            "choice": np.zeros(total, dtype=np.int32),
            "read_delay_ms": np.full(total, np.nan),  # user-space stamps: no kernel stamp to measure against
        }
        arrays = [kind if f.name == "kind" else _array(events[f.name], f) for f in EVENT_SCHEMA]
        event_parts.append(pa.Table.from_arrays(arrays, schema=EVENT_SCHEMA))
        step_starts.append([f"concurrency={level}", round(clock_s, 3)])
        clock_s += float(started[-1] + e2e[ok].max()) / 1000.0
    pq.write_table(pa.concat_tables(request_parts), run_dir / REQUESTS_FILE, compression="zstd")
    pq.write_table(pa.concat_tables(event_parts), run_dir / EVENTS_FILE, compression="zstd")

    arrivals = [{"kind": "closed", "concurrency": level} for level in concurrency]
    steps_meta = [(i, f"concurrency={level}", arrivals[i]) for i, level in enumerate(concurrency)]
    summaries = summarize_run(read_requests(run_dir), iter_event_batches(run_dir), steps_meta)
    points = []
    for second in np.arange(0.0, clock_s, 1.0):
        level_index = max(i for i, (_, at_s) in enumerate(step_starts) if at_s <= second)
        running = min(concurrency[level_index], 4)
        points.append([float(second), running, max(0, concurrency[level_index] - 4), running / 8])
    created = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC).isoformat(timespec="seconds")
    data = {
        "created": created,
        "finished": created,
        "interrupted": False,
        "model": "synthetic",
        "config": {
            "url": "http://127.0.0.1:8088/v1",
            "model": "synthetic",
            "dialect": "openai.chat",
            "api": "chat",
            "steps": arrivals,
            "workload": {
                "seed": seed,
                "classes": [
                    {
                        "name": "default",
                        "weight": 1.0,
                        "prompt_tokens": "fixed(256)",
                        "output_tokens": f"fixed({output_tokens})",
                        "ignore_eos": True,
                        "prompt_file": None,
                    }
                ],
            },
            "requests": requests_per_step,
            "slo": None,
        },
        "environment": {},
        "files": {"requests": REQUESTS_FILE, "events": EVENTS_FILE},
        "steps": [
            {"step": s.step, "label": s.label, "workers": 1, "interrupted": False, "pool": {}, "summary": s.to_dict()}
            for s in summaries
        ],
        "server_gauges": {
            "url": "http://127.0.0.1:8088/metrics",
            "family": "lab",
            "points": points,
            "steps": step_starts,
        },
    }
    write_run_json(run_dir, data)
    return run_dir
