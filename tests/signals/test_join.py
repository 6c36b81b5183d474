"""The join: server signals onto a hand-built Timeline, and the TTFT split that adds up exactly."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from latscope.signals.join import TtftPart, apply_server_signals, server_measures, ttft_split
from latscope.timeline.model import ConnectionInfo, ServerMeasure, TcpInfo, Timeline
from tests.support.httpfile import load_capture

MS = 1_000_000
T0 = 5_000_000_000

LAB_SERVER_TIMING = "parse;dur=0.500, validate;dur=0.250, queue;dur=20.000, prefill;dur=40.000"
LAB_OBJECT: dict[str, Any] = {
    "request_id": "lab-1",
    "parse_ms": 0.5,
    "validate_ms": 0.25,
    "queue_ms": 20.0,
    "window_wait_ms": 15.0,
    "prefill_ms": 40.0,
    "decode_ms": 200.0,
    "preemptions": 0,
}


def _timeline(**changes: Any) -> Timeline:
    """A request with a 100 ms TTFT: 5 ms to a connection, 1 ms to send, first byte at 30 ms."""
    timeline = Timeline(
        started_ns=T0,
        dns_start_ns=T0,
        dns_end_ns=T0 + 1 * MS,
        connect_start_ns=T0 + 1 * MS,
        connect_end_ns=T0 + 5 * MS,
        connection_ready_ns=T0 + 5 * MS,
        send_start_ns=T0 + 5 * MS,
        send_end_ns=T0 + 6 * MS,
        first_byte_ns=T0 + 30 * MS,
        headers_received_ns=T0 + 30 * MS,
        first_token_ns=T0 + 100 * MS,
        last_token_ns=T0 + 300 * MS,
        ended_ns=T0 + 301 * MS,
        response_headers={"server-timing": LAB_SERVER_TIMING, "x-request-id": "lab-1"},
    )
    for key, value in changes.items():
        setattr(timeline, key, value)
    return timeline


def test_server_timing_then_body_measures_with_their_sources() -> None:
    timeline = _timeline()
    apply_server_signals(timeline, extra={"latscope": LAB_OBJECT}, timings={"prompt_ms": 40.0, "predicted_ms": 200.0})
    assert [(m.name, m.ms, m.source) for m in timeline.server] == [
        ("parse", 0.5, "header:server-timing:parse"),
        ("validate", 0.25, "header:server-timing:validate"),
        ("queue", 20.0, "header:server-timing:queue"),
        ("prefill", 40.0, "header:server-timing:prefill"),
        ("prefill", 40.0, "body:timings.prompt_ms"),
        ("decode", 200.0, "body:timings.predicted_ms"),
        ("parse", 0.5, "body:latscope.parse_ms"),
        ("validate", 0.25, "body:latscope.validate_ms"),
        ("queue", 20.0, "body:latscope.queue_ms"),
        ("window_wait", 15.0, "body:latscope.window_wait_ms"),
        ("prefill", 40.0, "body:latscope.prefill_ms"),
        ("decode", 200.0, "body:latscope.decode_ms"),
    ]
    assert timeline.server_ms("queue") == 20.0
    assert timeline.server_fields["latscope"] == LAB_OBJECT
    assert timeline.server_fields["timings"] == {"prompt_ms": 40.0, "predicted_ms": 200.0}
    assert timeline.server_fields["request_id"] == {"header": "x-request-id", "value": "lab-1"}
    assert timeline.server_fields["server_timing"] == [
        {"name": "parse", "dur_ms": 0.5, "desc": None},
        {"name": "validate", "dur_ms": 0.25, "desc": None},
        {"name": "queue", "dur_ms": 20.0, "desc": None},
        {"name": "prefill", "dur_ms": 40.0, "desc": None},
    ]
    assert timeline.warnings == []


def test_the_lab_object_may_be_the_extra_itself() -> None:
    measures = server_measures(extra=LAB_OBJECT)
    assert [m.source for m in measures][:2] == ["body:latscope.parse_ms", "body:latscope.validate_ms"]


def test_applying_twice_adds_nothing_new() -> None:
    timeline = _timeline()
    apply_server_signals(timeline, extra=LAB_OBJECT)
    count = len(timeline.server)
    apply_server_signals(timeline, extra=LAB_OBJECT)
    assert len(timeline.server) == count


def test_trailers_and_aliases() -> None:
    timeline = _timeline(response_headers={})
    apply_server_signals(timeline, trailers=[("Server-Timing", 'total;dur=301, gpu;desc="H200";dur=250')])
    assert timeline.server == [
        ServerMeasure("e2e", 301.0, "trailer:server-timing:total"),
        ServerMeasure("gpu", 250.0, "trailer:server-timing:gpu"),
    ]


def test_server_measures_reads_field_names_of_either_section_in_any_case() -> None:
    measures = server_measures(
        headers=[("SERVER-TIMING", "queue;dur=3")],
        trailers=iter([("Server-Timing", "prefill;dur=5")]),  # an iterator: read once
    )
    assert [(m.name, m.ms, m.source) for m in measures] == [
        ("queue", 3.0, "header:server-timing:queue"),
        ("prefill", 5.0, "trailer:server-timing:prefill"),
    ]


def test_malformed_signals_become_timeline_warnings() -> None:
    timeline = _timeline(response_headers={"server-timing": "queue;dur=soon", "x-queue-time": "?"})
    apply_server_signals(timeline, body={"timings": {"prompt_ms": "fast"}})
    assert timeline.server == []
    assert len(timeline.warnings) == 3
    assert all(w.startswith("server signals: ") for w in timeline.warnings)


def test_ttft_split_adds_up_exactly_and_subtracts_the_window_wait_from_the_queue() -> None:
    timeline = _timeline()
    apply_server_signals(timeline, extra=LAB_OBJECT)
    split = ttft_split(timeline)
    assert split is not None
    assert split.ttft_ms == 100.0
    assert [(p.name, p.ms) for p in split.parts] == [
        ("connection", 5.0),
        ("send", 1.0),
        ("parse", 0.5),
        ("validate", 0.25),
        ("window_wait", 15.0),
        ("queue", 5.0),
        ("prefill", 40.0),
        ("network_and_other", 33.25),
    ]
    assert sum(p.ns for p in split.parts) == split.ttft_ns
    assert split.parts[5].source == "header:server-timing:queue − body:latscope.window_wait_ms"
    assert split.consistent
    assert split.ms("prefill") == 40.0 and split.ms("decode") is None


def test_ttft_split_separates_one_round_trip_when_tcp_info_is_known() -> None:
    info = TcpInfo(rtt_us=2500, rttvar_us=300, min_rtt_us=2000, total_retrans=0, snd_cwnd=10, ato_us=40000)
    timeline = _timeline(connection=ConnectionInfo(connection_id=1, reused=False, tcp_info_at_headers=info))
    apply_server_signals(timeline)
    split = ttft_split(timeline)
    assert split is not None
    assert split.parts[-2:] == (
        TtftPart("network", 2 * MS, "tcp_info:min_rtt_us"),
        TtftPart("other", 31_250_000, "remainder"),  # 100 − 5 − 1 − 0.5 − 0.25 − 20 − 40 − 2 ms
    )
    assert sum(p.ns for p in split.parts) == split.ttft_ns


def test_ttft_split_without_server_signals_leaves_everything_after_sending_unattributed() -> None:
    split = ttft_split(_timeline(response_headers={}))
    assert split is not None
    assert [(p.name, p.ms) for p in split.parts] == [("connection", 5.0), ("send", 1.0), ("network_and_other", 94.0)]


def test_ttft_split_when_the_server_reports_more_than_the_client_saw() -> None:
    timeline = _timeline(response_headers={"server-timing": "prefill;dur=150"})
    apply_server_signals(timeline)
    split = ttft_split(timeline)
    assert split is not None and not split.consistent
    assert split.ms("network_and_other") == -56.0
    assert sum(p.ns for p in split.parts) == split.ttft_ns


def test_ttft_split_merges_connection_and_send_without_a_ready_mark() -> None:
    split = ttft_split(_timeline(connection_ready_ns=None, response_headers={}))
    assert split is not None and [p.name for p in split.parts] == ["connection_send", "network_and_other"]


def test_no_first_token_no_split() -> None:
    assert ttft_split(_timeline(first_token_ns=None)) is None


def test_real_llama_server_stream_prefill_from_the_final_chunk() -> None:
    capture = load_capture("llama-server.chat.stream.http")
    final = orjson.loads([line for line in capture.body.split(b"\n") if b'"timings"' in line][-1][len(b"data: ") :])
    timeline = _timeline(response_headers=dict(capture.headers))
    apply_server_signals(timeline, timings=final["timings"])
    assert timeline.server_ms("prefill") == 18.214
    assert timeline.server_ms("decode") == 1.693
    split = ttft_split(timeline)
    assert split is not None
    # llama.cpp reports no queue: client TTFT − prompt_ms ≈ network + slot wait + tokenising (server-signals.md).
    assert split.ms("network_and_other") == pytest.approx(100.0 - 6.0 - 18.214)


def test_tgi_headers_on_a_non_streaming_response() -> None:
    headers = {"x-total-time": "602", "x-validation-time": "1", "x-queue-time": "3", "x-inference-time": "598"}
    timeline = _timeline(response_headers=headers)
    apply_server_signals(timeline)
    assert timeline.server_ms("queue") == 3.0 and timeline.server_ms("e2e") == 602.0
    split = ttft_split(timeline)
    assert split is not None and [p.name for p in split.parts] == [
        "connection",
        "send",
        "validate",
        "queue",
        "network_and_other",
    ]


def test_ollama_durations_from_the_final_chunk_extra() -> None:
    extra = {
        "total_duration": 90_000_000,
        "load_duration": 5_000_000,
        "prompt_eval_count": 9,
        "prompt_eval_duration": 20_000_000,
        "eval_count": 3,
        "eval_duration": 60_000_000,
    }
    timeline = _timeline(response_headers={})
    apply_server_signals(timeline, extra=extra)
    assert [(m.name, m.ms) for m in timeline.server] == [
        ("e2e", 90.0),
        ("load", 5.0),
        ("prefill", 20.0),
        ("decode", 60.0),
        ("slot_wait_templating", 5.0),
    ]
    assert timeline.server_fields["ollama"] == extra
    split = ttft_split(timeline)
    assert split is not None
    assert [p.name for p in split.parts][2:] == ["load", "slot_wait_templating", "prefill", "network_and_other"]
