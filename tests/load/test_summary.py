"""Aggregation: per-gap ITL, warm-up exclusion, zero gaps, errors by phase, goodput, classes, pacing numbers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from latscope.load.health import ClientHealth, WorkerHealth
from latscope.load.slo import parse_slo
from latscope.load.summary import StepSummary, summarize_run
from latscope.runs.records import RequestContext
from latscope.runs.storage import PartWriter, iter_event_batches, merge_parts, read_requests
from latscope.timeline.model import Phase, Timeline
from tests.support.load_timelines import MS, make_timeline

START = 1_000 * MS
CLOSED = {"kind": "closed", "concurrency": 4}


def summarize(
    tmp_path: Path,
    timelines: Sequence[Timeline],
    *,
    warmup: Sequence[bool] | None = None,
    classes: Sequence[str] | None = None,
    lags_ns: Sequence[int | None] | None = None,
    arrival: dict[str, object] | None = None,
    slo: str | None = None,
    client: ClientHealth | None = None,
) -> StepSummary:
    writer = PartWriter(tmp_path, 0, 0, threaded=False)
    for i, t in enumerate(timelines):
        writer.add(
            t,
            RequestContext(
                step=0,
                request_id=i,
                worker=0,
                class_name=classes[i] if classes else "default",
                warmup=warmup[i] if warmup else False,
                step_start_ns=START,
                schedule_lag_ns=lags_ns[i] if lags_ns else None,
            ),
        )
    writer.close()
    merge_parts(tmp_path)
    [summary] = summarize_run(
        read_requests(tmp_path),
        iter_event_batches(tmp_path),
        [(0, "step", arrival or CLOSED)],
        slo=None if slo is None else parse_slo(slo),
        clients={0: client} if client else None,
    )
    return summary


def test_a_stall_in_one_gap_shows_in_itl_p99_instead_of_being_averaged_away(tmp_path: Path) -> None:
    # 10 requests × 100 gaps of 20 ms; each request stalls twice for 500 ms (2 % of the gaps).
    timelines = []
    for i in range(10):
        gaps = [20.0] * 100
        gaps[30] = gaps[70] = 500.0
        timelines.append(make_timeline(start_ns=START + i * 5000 * MS, gaps_ms=gaps))
    s = summarize(tmp_path, timelines)
    itl = s.overall.metrics["itl_ms"]
    assert itl.count == 1000  # one sample per gap, not one per request
    assert itl.p99 == pytest.approx(500.0)
    assert itl.max == pytest.approx(500.0)
    # What a per-request mean would have reported: every request looks the same, and far from the stall.
    per_request_means = [np.mean(np.diff([e.at_ns for e in t.events if e.tokens]) / MS) for t in timelines]
    assert np.percentile(per_request_means, 99) < itl.p99 / 10


def test_warm_up_requests_are_excluded_from_every_number(tmp_path: Path) -> None:
    warm = [make_timeline(start_ns=START + i * MS, ttft_ms=900.0, gaps_ms=[300.0]) for i in range(3)]
    measured = [make_timeline(start_ns=START + (10 + i) * MS, ttft_ms=50.0, gaps_ms=[10.0]) for i in range(5)]
    s = summarize(tmp_path, warm + measured, warmup=[True] * 3 + [False] * 5)
    assert s.warmup_requests == 3
    assert s.overall.requests == 5
    assert s.overall.metrics["ttft_ms"].max == pytest.approx(50.0)
    assert s.overall.metrics["itl_ms"].max == pytest.approx(10.0)
    assert s.overall.token_gaps == 5


def test_zero_gaps_from_coalesced_events_are_counted_reported_and_warned(tmp_path: Path) -> None:
    timelines = [
        make_timeline(start_ns=START + i * 100 * MS, gaps_ms=[10.0, 0.0, 0.0, 10.0], coalesced=[2, 3]) for i in range(4)
    ]
    s = summarize(tmp_path, timelines)
    o = s.overall
    assert (o.token_gaps, o.zero_gaps) == (16, 8)
    assert o.metrics["itl_ms"].p50 == pytest.approx(5.0)  # zeros are in the distribution, as measured
    assert o.coalesced_events >= 8
    assert any("are 0 ms" in w and "coalesced" in w for w in s.warnings)


def test_a_target_that_errors_mid_run_gives_errors_by_phase_kind_and_status(tmp_path: Path) -> None:
    ok = [make_timeline(start_ns=START + i * MS) for i in range(6)]
    bad = [
        make_timeline(start_ns=START + 10 * MS, error=(Phase.STREAM, "reset", None)),
        make_timeline(start_ns=START + 11 * MS, error=(Phase.STREAM, "reset", None)),
        make_timeline(start_ns=START + 12 * MS, error=(Phase.HEADERS, "http-status", 503)),
        make_timeline(start_ns=START + 13 * MS, error=(Phase.CONNECT, "refused", None)),
    ]
    s = summarize(tmp_path, ok + bad)
    o = s.overall
    assert (o.requests, o.ok, o.errors) == (10, 6, 4)
    assert o.error_rate == pytest.approx(0.4)
    assert o.errors_by_phase == {"stream": 2, "headers": 1, "connect": 1}
    assert o.errors_by_kind == {"reset": 2, "http-status": 1, "refused": 1}
    assert o.errors_by_status == {"503": 1}
    assert o.metrics["ttft_ms"].count == 6  # latencies are over successful requests
    assert any("4 of 10 requests failed" in w for w in s.warnings)


def test_goodput_counts_requests_meeting_every_slo(tmp_path: Path) -> None:
    timelines = [
        make_timeline(start_ns=START + i * 1000 * MS, ttft_ms=ttft, gaps_ms=[10.0] * 5)
        for i, ttft in enumerate([100.0, 200.0, 300.0, 600.0])
    ]
    s = summarize(tmp_path, timelines, slo="ttft=250ms,tpot=20ms")
    assert s.overall.goodput_fraction == pytest.approx(0.5)
    assert s.overall.goodput_rps == pytest.approx(2 / s.window_s)
    assert s.slo == {"ttft": 250.0, "tpot": 20.0}


def test_throughput_is_per_second_of_the_measured_window(tmp_path: Path) -> None:
    # 5 requests starting 1 s apart, each 50 ms TTFT + 3×10 ms gaps + 1 ms: the window is 4 s + 81 ms.
    timelines = [make_timeline(start_ns=START + i * 1000 * MS) for i in range(5)]
    s = summarize(tmp_path, timelines)
    assert s.window_s == pytest.approx(4.081)
    assert s.overall.throughput_rps == pytest.approx(5 / 4.081)
    assert s.overall.output_tokens_per_s == pytest.approx(5 * 4 / 4.081)


def test_each_class_gets_its_own_numbers(tmp_path: Path) -> None:
    timelines = [make_timeline(start_ns=START + i * MS, ttft_ms=30.0 if i % 2 else 300.0) for i in range(10)]
    s = summarize(tmp_path, timelines, classes=["short" if i % 2 else "long" for i in range(10)])
    assert set(s.classes) == {"long", "short"}
    assert s.classes["short"].metrics["ttft_ms"].max == pytest.approx(30.0)
    assert s.classes["long"].metrics["ttft_ms"].min == pytest.approx(300.0)
    assert s.classes["short"].token_gaps == 15


def test_open_loop_reports_rates_and_dispatch_lag(tmp_path: Path) -> None:
    # Scheduled every 10 ms (100/s); started late by a growing amount: the achieved rate falls short.
    timelines = [
        make_timeline(start_ns=START + i * 10 * MS + i * MS // 2, scheduled_ns=START + i * 10 * MS) for i in range(50)
    ]
    arrival = {"kind": "open", "rate_rps": 100.0, "process": "constant", "burstiness": 1.0, "max_concurrency": None}
    s = summarize(tmp_path, timelines, arrival=arrival, lags_ns=[i * MS // 2 for i in range(50)])
    assert s.offered_rps == 100.0
    assert s.schedule_rps == pytest.approx(100.0)
    assert s.achieved_rps == pytest.approx(49 / 0.5145)
    assert s.schedule_lag_ms is not None and s.schedule_lag_ms.max == pytest.approx(24.5)
    assert s.overall.metrics["client_queue_ms"].max == pytest.approx(24.5)
    assert any("fell behind" in w for w in s.warnings)
    assert any("dispatch lag" in w for w in s.warnings)


def test_client_delay_against_server_stamps_is_summarised(tmp_path: Path) -> None:
    s = summarize(tmp_path, [make_timeline(start_ns=START + i * MS, server_delay_ms=0.3) for i in range(3)])
    assert s.client_delay_ms is not None and s.client_delay_ms.p50 == pytest.approx(0.3)


def test_a_saturated_client_is_warned_about(tmp_path: Path) -> None:
    hot = ClientHealth.merge([WorkerHealth(0, loop_cpu=[0.99, 0.97, 0.5], loop_lag_ms=[0.5, 0.6])])
    s = summarize(tmp_path, [make_timeline()], client=hot)
    assert hot.saturated
    assert any("client was saturated" in w and "--workers" in w for w in s.warnings)


def test_a_lagging_loop_on_a_busy_machine_is_told_apart_from_saturation(tmp_path: Path) -> None:
    sample = WorkerHealth(0, loop_cpu=[0.3] * 4, loop_lag_ms=[0.5, 9.0, 12.0], machine_busy=[1.0])
    crowded = ClientHealth.merge([sample])
    s = summarize(tmp_path, [make_timeline()], client=crowded)
    assert any("lagged" in w and "competed for the CPU" in w for w in s.warnings)
    assert not any("client was saturated" in w for w in s.warnings)


def test_connection_reuse_is_counted(tmp_path: Path) -> None:
    timelines = [make_timeline(start_ns=START + i * MS, reused=i > 0) for i in range(4)]
    s = summarize(tmp_path, timelines)
    assert (s.connections_opened, s.connections_reused) == (1, 3)


def test_summaries_round_trip_through_dicts(tmp_path: Path) -> None:
    health = ClientHealth.merge([WorkerHealth(0, loop_cpu=[0.2], loop_lag_ms=[0.4], rss_max_bytes=2**25)])
    s = summarize(
        tmp_path,
        [make_timeline(start_ns=START + i * MS, ttft_ms=10.0 * (i + 1), server_delay_ms=0.1) for i in range(6)],
        classes=["a", "b"] * 3,
        slo="ttft=35ms",
        client=health,
    )
    assert StepSummary.from_dict(s.to_dict()) == s


def test_a_loop_that_lagged_while_busy_is_called_saturated_even_in_a_mostly_idle_step(tmp_path: Path) -> None:
    # a 0.3 s burst at full CPU in a step that then idles: the means are low, the lagging samples are not
    sample = WorkerHealth(
        0,
        loop_cpu=[0.99, 0.98, 0.97] + [0.02] * 30,
        loop_lag_ms=[40.0, 80.0, 60.0] + [0.3] * 30,
        machine_busy=[0.6] * 3 + [0.1] * 30,
    )
    health = ClientHealth.merge([sample])
    assert not sample.saturated and health.saturated
    s = summarize(tmp_path, [make_timeline()], client=health)
    assert any("lagged" in w and "saturated at those times" in w for w in s.warnings), s.warnings


def test_a_loop_that_lagged_with_nothing_busy_is_called_blocked(tmp_path: Path) -> None:
    sample = WorkerHealth(0, loop_cpu=[0.1] * 4, loop_lag_ms=[0.5, 30.0, 50.0, 0.4], machine_busy=[0.2] * 4)
    s = summarize(tmp_path, [make_timeline()], client=ClientHealth.merge([sample]))
    assert any("something blocked it" in w for w in s.warnings), s.warnings
