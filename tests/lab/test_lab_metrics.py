"""The lab's /metrics text: exact names for each scheme, and counts that match what the scheduler did."""

from __future__ import annotations

import asyncio
import re

import pytest

from latscope.lab.costmodel import CostModel
from latscope.lab.metrics import LabMetrics
from latscope.lab.scheduler import GenerationRequest, RequestStream, Scheduler, SchedulerConfig

LAB_NAMES = [
    "latscope_lab_request_queue_seconds",
    "latscope_lab_request_prefill_seconds",
    "latscope_lab_request_decode_seconds",
    "latscope_lab_time_to_first_token_seconds",
    "latscope_lab_e2e_request_latency_seconds",
    "latscope_lab_request_parse_seconds",
    "latscope_lab_requests_running",
    "latscope_lab_requests_waiting",
    "latscope_lab_kv_cache_usage_ratio",
    "latscope_lab_iteration_tokens",
    "latscope_lab_preemptions_total",
    "latscope_lab_prompt_tokens_total",
    "latscope_lab_generation_tokens_total",
    "latscope_lab_requests_total",
]
VLLM_NAMES = [
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:iteration_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
]
HISTOGRAMS = {
    "lab": [
        "latscope_lab_request_queue_seconds",
        "latscope_lab_request_prefill_seconds",
        "latscope_lab_request_decode_seconds",
        "latscope_lab_time_to_first_token_seconds",
        "latscope_lab_e2e_request_latency_seconds",
    ],
    "vllm": [
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ],
}
FAST = CostModel.zero().with_overrides(decode_base_ms=0.2)


def type_lines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))


def test_lab_scheme_exposes_exactly_the_documented_names() -> None:
    text, content_type = LabMetrics("lab").render()
    types = type_lines(text.decode())
    for name in LAB_NAMES:
        assert name in types, name
    assert types["latscope_lab_iteration_tokens"] == "histogram"
    assert types["latscope_lab_kv_cache_usage_ratio"] == "gauge"
    assert types["latscope_lab_requests_total"] == "counter"
    assert not any(name.startswith("vllm:") for name in types)
    assert content_type.startswith("text/plain; version=0.0.4")


def test_vllm_scheme_exposes_vllms_names_with_the_model_label() -> None:
    metrics = LabMetrics("vllm", model_name="meta-llama/Llama-3.1-8B")
    metrics.set_state(2, 3, 0.25)
    metrics.add_preemptions()
    metrics.observe_request(finished_reason="length", queue_s=0.1, prefill_s=0.2, decode_s=0.3, ttft_s=0.35, e2e_s=0.7)
    text = metrics.render()[0].decode()
    types = type_lines(text)
    for name in VLLM_NAMES:
        assert name in types, name
    assert types["vllm:iteration_tokens_total"] == "histogram"
    assert types["vllm:num_preemptions_total"] == "counter"
    assert not any(name.startswith("latscope_") for name in types)
    assert 'vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B"} 3.0' in text
    assert 'vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B"} 0.25' in text
    assert 'vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B"} 1.0' in text
    assert re.search(r'vllm:request_success_total\{finished_reason="length",model_name="[^"]+"\} 1\.0', text)


def test_parse_time_is_a_lab_metric_only() -> None:
    lab, vllm = LabMetrics("lab"), LabMetrics("vllm")
    lab.observe_parse(0.002)
    vllm.observe_parse(0.002)
    assert lab.registry.get_sample_value("latscope_lab_request_parse_seconds_count") == 1
    assert "parse" not in vllm.render()[0].decode()


def test_several_labs_in_one_process_keep_separate_registries() -> None:
    a, b = LabMetrics("vllm"), LabMetrics("vllm")
    a.add_generation_tokens(5)
    labels = {"model_name": "lab-model"}
    assert a.registry.get_sample_value("vllm:generation_tokens_total", labels) == 5
    assert b.registry.get_sample_value("vllm:generation_tokens_total", labels) == 0


def test_an_unknown_scheme_is_rejected() -> None:
    with pytest.raises(ValueError, match="naming scheme"):
        LabMetrics("tgi")  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["lab", "vllm"])
async def test_histogram_counts_match_the_finished_requests(scheme: str) -> None:
    metrics = LabMetrics(scheme)  # type: ignore[arg-type]
    scheduler = Scheduler(SchedulerConfig(cost=FAST), metrics=metrics)
    await scheduler.start()
    try:
        streams = [scheduler.submit(GenerationRequest(f"r{i}", 20 + i, 5 + i)) for i in range(7)]
        await asyncio.gather(*(_drain(s) for s in streams))
    finally:
        await scheduler.stop()
    labels = {"model_name": "lab-model"} if scheme == "vllm" else {}
    value = metrics.registry.get_sample_value
    for name in HISTOGRAMS[scheme]:
        assert value(f"{name}_count", labels) == 7, name
    prefix = "vllm:" if scheme == "vllm" else "latscope_lab_"
    success = "vllm:request_success_total" if scheme == "vllm" else "latscope_lab_requests_total"
    assert value(success, {**labels, "finished_reason": "length"}) == 7
    assert value(f"{prefix}generation_tokens_total", labels) == sum(5 + i for i in range(7))
    assert value(f"{prefix}prompt_tokens_total", labels) == sum(20 + i for i in range(7))
    iteration = "vllm:iteration_tokens_total" if scheme == "vllm" else "latscope_lab_iteration_tokens"
    steps = sum(scheduler.injected_cost()["steps"].values())
    assert value(f"{iteration}_count", labels) == steps
    # Every token was processed in some step: the histogram's sum covers prompts and generated tokens.
    assert value(f"{iteration}_sum", labels) == sum(20 + i for i in range(7)) + sum(5 + i for i in range(7)) - 7


@pytest.mark.parametrize("scheme", ["lab", "vllm"])
async def test_gauges_follow_the_engine_state(scheme: str) -> None:
    metrics = LabMetrics(scheme)  # type: ignore[arg-type]
    prefix = "vllm:num_requests_" if scheme == "vllm" else "latscope_lab_requests_"
    labels = {"model_name": "lab-model"} if scheme == "vllm" else {}
    slow = CostModel.zero().with_overrides(decode_base_ms=5.0, max_batch=2)
    scheduler = Scheduler(SchedulerConfig(cost=slow), metrics=metrics)
    await scheduler.start()
    try:
        streams = [scheduler.submit(GenerationRequest(f"r{i}", 10, 50)) for i in range(5)]
        await asyncio.sleep(0.02)
        assert metrics.registry.get_sample_value(f"{prefix}running", labels) == 2
        assert metrics.registry.get_sample_value(f"{prefix}waiting", labels) == 3
        for stream in streams:
            stream.cancel()
        assert metrics.registry.get_sample_value(f"{prefix}running", labels) == 0
        assert metrics.registry.get_sample_value(f"{prefix}waiting", labels) == 0
    finally:
        await scheduler.stop()


async def _drain(stream: RequestStream) -> None:
    async for _ in stream:
        pass
