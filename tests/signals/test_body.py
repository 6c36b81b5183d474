"""Body signals: llama.cpp timings (ms), Ollama durations (ns), SGLang meta_info (s), the lab object (ms), usage."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from latscope.signals.body import (
    LlamaCppTimings,
    OllamaDurations,
    body_measures,
    lab_measures,
    ollama_measures,
    parse_llamacpp_timings,
    parse_ollama_durations,
    parse_usage,
    sglang_measures,
)
from latscope.timeline.model import ServerMeasure, Usage
from tests.support.httpfile import load_capture

OLLAMA_FINAL = orjson.loads(
    b'{"model":"llama3.2","created_at":"2025-01-15T10:00:00.557541Z","message":{"role":"assistant","content":""},'
    b'"done_reason":"stop","done":true,"total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,'
    b'"prompt_eval_duration":342546000,"eval_count":282,"eval_duration":4535599000}'
)


def _last_stream_object(name: str) -> dict[str, Any]:
    events = [line[len(b"data: ") :] for line in load_capture(name).body.split(b"\n") if line.startswith(b"data: {")]
    return dict(orjson.loads(events[-1]))


def test_llama_server_stream_final_chunk_timings() -> None:
    final = _last_stream_object("llama-server.chat.stream.http")
    assert body_measures(final) == [
        ServerMeasure("prefill", 18.214, "body:timings.prompt_ms"),
        ServerMeasure("decode", 1.693, "body:timings.predicted_ms"),
    ]
    timings = parse_llamacpp_timings(final["timings"])
    assert timings == LlamaCppTimings(
        cache_n=0,
        prompt_n=65,
        prompt_ms=18.214,
        prompt_per_token_ms=0.2802153846153846,
        prompt_per_second=3568.683430328319,
        predicted_n=8,
        predicted_ms=1.693,
        predicted_per_token_ms=0.24185714285714285,
        predicted_per_second=4134.672179562906,
    )


def test_llama_server_non_streaming_body_with_cached_prompt() -> None:
    body = orjson.loads(load_capture("llama-server.chat.nonstream.http").body)
    timings = parse_llamacpp_timings(body["timings"])
    assert (timings.cache_n, timings.prompt_n, timings.prompt_ms, timings.predicted_ms) == (64, 1, 0.351, 1.538)
    assert parse_usage(body["usage"]) == Usage(65, 8, 73, cached_tokens=64)


def test_ollama_durations_are_nanoseconds() -> None:
    durations = parse_ollama_durations(OLLAMA_FINAL)
    assert durations == OllamaDurations(4883583458, 1334875, 342546000, 4535599000, 26, 282)
    assert durations.slot_wait_templating_ns == 4103583
    assert ollama_measures(durations) == [
        ServerMeasure("e2e", 4883.583458, "body:total_duration"),
        ServerMeasure("load", 1.334875, "body:load_duration"),
        ServerMeasure("prefill", 342.546, "body:prompt_eval_duration"),
        ServerMeasure("decode", 4535.599, "body:eval_duration"),
        ServerMeasure(
            "slot_wait_templating", 4.103583, "body:total_duration-load_duration-prompt_eval_duration-eval_duration"
        ),
    ]


def test_ollama_durations_that_exceed_the_total_give_no_slot_wait() -> None:
    warnings: list[str] = []
    durations = OllamaDurations(total_ns=100, load_ns=50, prompt_eval_ns=40, eval_ns=30)
    names = [m.name for m in ollama_measures(durations, warnings=warnings)]
    assert names == ["e2e", "load", "prefill", "decode"]
    assert len(warnings) == 1


def test_sglang_e2e_latency_is_seconds() -> None:
    meta_info = {"prompt_tokens": 12, "completion_tokens": 7, "cached_tokens": 0, "e2e_latency": 0.1234}
    (measure,) = sglang_measures(meta_info)
    assert (measure.name, measure.source) == ("e2e", "body:meta_info.e2e_latency")
    assert measure.ms == pytest.approx(123.4)


def test_lab_object_every_ms_field_named_after_its_phase() -> None:
    lab = {
        "request_id": "lab-7",
        "parse_ms": 0.5,
        "validate_ms": 0.25,
        "queue_ms": 12.0,
        "window_wait_ms": 10.0,
        "prefill_ms": 30.0,
        "decode_ms": 200.0,
        "preemptions": 0,
        "sent_ns": 123456789,
    }
    assert [(m.name, m.ms, m.source) for m in lab_measures(lab)] == [
        ("parse", 0.5, "body:latscope.parse_ms"),
        ("validate", 0.25, "body:latscope.validate_ms"),
        ("queue", 12.0, "body:latscope.queue_ms"),
        ("window_wait", 10.0, "body:latscope.window_wait_ms"),
        ("prefill", 30.0, "body:latscope.prefill_ms"),
        ("decode", 200.0, "body:latscope.decode_ms"),
    ]


def test_body_measures_finds_every_shape_in_one_object() -> None:
    body = {"timings": {"prompt_ms": 5.0}, "latscope": {"queue_ms": 1.0}, "meta_info": {"e2e_latency": 2}}
    assert [m.source for m in body_measures(body)] == [
        "body:timings.prompt_ms",
        "body:latscope.queue_ms",
        "body:meta_info.e2e_latency",
    ]
    assert body_measures({"choices": []}) == []


@pytest.mark.parametrize(
    "obj",
    [
        {"timings": {"prompt_ms": "fast"}},
        {"timings": {"predicted_ms": -1}},
        {"timings": {"prompt_n": 1.5}},
        {"timings": {"prompt_ms": True}},
        {"latscope": {"queue_ms": None, "prefill_ms": [1]}},
        {"meta_info": {"e2e_latency": float("nan")}},
        {"total_duration": -5},
    ],
)
def test_malformed_values_are_ignored_with_a_warning(obj: dict[str, object]) -> None:
    warnings: list[str] = []
    assert body_measures(obj, warnings=warnings) == []
    assert len(warnings) == 1


def test_usage_with_details_and_unreadable_fields() -> None:
    warnings: list[str] = []
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": "many",
        "total_tokens": 30,
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    assert parse_usage(usage, warnings=warnings) == Usage(10, None, 30, None, 12)
    assert len(warnings) == 1
    assert parse_usage({}) is None
