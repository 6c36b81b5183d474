"""Per-server adapters: each family's fixture pair → ServerWindowStats with the window's known values."""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.signals.engines import ADAPTERS, detect_family, register_adapter, window_stats
from latscope.signals.prometheus import Snapshot, parse_exposition
from latscope.signals.windowstats import GaugeStats, ServerWindowStats
from tests.support.httpfile import load_capture

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"


def _pair(name: str) -> tuple[Snapshot, Snapshot]:
    before = parse_exposition((FIXTURES / f"{name}.before.prom").read_text(), taken_at_s=100.0)
    if name == "llama-server":
        after_text = load_capture("llama-server.metrics.http").body.decode()
    else:
        after_text = (FIXTURES / f"{name}.after.prom").read_text()
    return before, parse_exposition(after_text, taken_at_s=110.0)


def _stats(name: str) -> ServerWindowStats:
    warnings: list[str] = []
    stats = window_stats(*_pair(name), warnings=warnings)
    assert warnings == []
    assert stats is not None and stats.interval_s == 10.0
    return stats


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("tgi", "tgi"),
        ("llama-server", "llamacpp"),
        ("triton", "triton"),
        ("lab", "lab"),
    ],
)
def test_family_is_detected_from_metric_names(name: str, family: str) -> None:
    assert detect_family(_pair(name)[1]) == family


def test_vllm_window() -> None:
    s = _stats("vllm")
    assert s.family == "vllm"
    assert s.requests_finished == 4.0
    assert s.finished_by_reason == {"stop": 3.0, "length": 1.0, "abort": 0.0}
    assert s.mean_queue_ms == pytest.approx(25.0)
    assert s.mean_prefill_ms == pytest.approx(150.0)
    assert s.mean_decode_ms == pytest.approx(1500.0)
    assert s.mean_inference_ms == pytest.approx(1650.0)
    assert s.mean_ttft_ms == pytest.approx(185.0)
    assert s.mean_e2e_ms == pytest.approx(1685.0)
    assert s.mean_api_overhead_ms == pytest.approx(10.0)
    assert s.mean_itl_ms == pytest.approx(50.0)
    assert s.mean_tpot_ms == pytest.approx(50.0)
    assert s.total_prefill_ms == pytest.approx(600.0)
    assert s.total_decode_ms == pytest.approx(6000.0)
    assert s.mean_tokens_per_step == pytest.approx(36.0)
    assert (s.preemptions, s.prompt_tokens, s.generation_tokens, s.cached_prompt_tokens) == (1.0, 400.0, 100.0, 96.0)
    assert s.prefix_cache_hit_ratio == pytest.approx(0.24)
    assert s.running == GaugeStats(last=4.0, mean=2.0, max=4.0, samples=2)
    assert [value for _, value in s.running.points] == [0.0, 4.0]  # the gauge over time, in scrape order
    assert s.waiting == GaugeStats(last=1.0, mean=0.5, max=1.0, samples=2)
    assert s.kv_usage == GaugeStats(last=0.3, mean=0.15, max=0.3, samples=2)
    assert s.sources["kv_usage"] == "vllm:kv_cache_usage_perc"
    assert s.sources["mean_itl_ms"] == "vllm:inter_token_latency_seconds"


def test_vllm_older_names_are_understood() -> None:
    before, after = _pair("vllm")
    renamed = {
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds",
        "vllm:prefix_cache_hits",
        "vllm:prefix_cache_queries",
    }

    def old(snapshot: Snapshot) -> Snapshot:
        return Snapshot({k: v for k, v in snapshot.families.items() if k not in renamed}, snapshot.taken_at_s)

    s = window_stats(old(before), old(after))
    assert s is not None
    assert s.sources["kv_usage"] == "vllm:gpu_cache_usage_perc" and s.kv_usage is not None
    assert s.sources["mean_itl_ms"] == "vllm:time_per_output_token_seconds"
    assert s.mean_itl_ms == pytest.approx(50.0)
    assert s.prefix_cache_hit_ratio == pytest.approx(0.24)


def test_sglang_window() -> None:
    s = _stats("sglang")
    assert s.requests_finished == 3.0
    assert s.mean_queue_ms == pytest.approx(100.0)
    assert s.mean_ttft_ms == pytest.approx(300.0)
    assert s.mean_e2e_ms == pytest.approx(1300.0)
    assert s.mean_itl_ms == pytest.approx(20.0)
    assert s.mean_prefill_ms is None and s.mean_api_overhead_ms is None
    assert (s.prompt_tokens, s.generation_tokens, s.cached_prompt_tokens) == (300.0, 33.0, 120.0)
    assert s.prefix_cache_hit_ratio == pytest.approx(0.4)
    assert s.running == GaugeStats(0.0, 1.5, 3.0, 2)
    assert s.waiting == GaugeStats(0.0, 1.0, 2.0, 2)
    assert s.kv_usage == GaugeStats(0.05, 0.15, 0.25, 2)


def test_tgi_window() -> None:
    s = _stats("tgi")
    assert s.requests_finished == 2.0
    assert s.mean_validate_ms == pytest.approx(3.0)
    assert s.mean_queue_ms == pytest.approx(20.0)
    assert s.mean_inference_ms == pytest.approx(577.0)
    assert s.mean_e2e_ms == pytest.approx(600.0)
    assert s.mean_tpot_ms == pytest.approx((488 / 20 + 666 / 20) / 2)
    assert s.total_prefill_ms == pytest.approx(120.0)
    assert s.total_decode_ms == pytest.approx(380.0)
    assert (s.prompt_tokens, s.generation_tokens) == (400.0, 40.0)
    assert s.waiting == GaugeStats(0.0, 0.5, 1.0, 2)
    assert s.running == GaugeStats(1.0, 1.5, 2.0, 2)
    assert s.sources["total_prefill_ms"] == 'tgi_batch_inference_duration_sum{method="prefill"}'


def test_llama_server_window_against_the_real_capture() -> None:
    s = _stats("llama-server")
    assert s.family == "llamacpp"
    assert s.requests_finished is None and s.mean_prefill_ms is None  # llama.cpp has no request counter
    assert s.total_prefill_ms == pytest.approx(0.772)
    assert s.total_decode_ms == pytest.approx(2.905)
    assert (s.prompt_tokens, s.generation_tokens, s.cached_prompt_tokens) == (5.0, 14.0, 66.0)
    assert s.mean_tokens_per_step == pytest.approx(19 / 13)
    assert s.mean_batch_size == 1.0
    assert s.waiting == GaugeStats(0.0, 0.0, 0.0, 2)
    assert s.running == GaugeStats(0.0, 0.0, 0.0, 2)
    assert s.kv_usage is None


def test_triton_microsecond_counters() -> None:
    s = _stats("triton")
    assert s.requests_finished == 4.0
    assert s.mean_queue_ms == pytest.approx(40.0)
    assert s.mean_inference_ms == pytest.approx(400.0)
    assert s.mean_e2e_ms == pytest.approx(500.0)
    assert s.mean_batch_size == pytest.approx(2.0)
    assert s.waiting == GaugeStats(3.0, 1.5, 3.0, 2)


def test_lab_window() -> None:
    s = _stats("lab")
    assert s.requests_finished == 2.0
    assert s.finished_by_reason == {"stop": 0.0, "length": 2.0}
    assert s.mean_parse_ms == pytest.approx(2.0)
    assert s.mean_queue_ms == pytest.approx(50.0)
    assert s.mean_prefill_ms == pytest.approx(30.0)
    assert s.mean_decode_ms == pytest.approx(300.0)
    assert s.mean_ttft_ms == pytest.approx(84.0)
    assert s.mean_e2e_ms == pytest.approx(384.0)
    assert s.mean_api_overhead_ms == pytest.approx(4.0)
    assert s.mean_tokens_per_step == pytest.approx((256 + 512 + 8) / 6)
    assert (s.preemptions, s.prompt_tokens, s.generation_tokens) == (2.0, 768.0, 32.0)
    assert s.running == GaugeStats(2.0, 1.0, 2.0, 2)
    assert s.waiting == GaugeStats(3.0, 1.5, 3.0, 2)
    assert s.kv_usage == GaugeStats(0.75, 0.375, 0.75, 2)


def test_gauges_include_the_snapshots_taken_during_the_window() -> None:
    before, after = _pair("vllm")
    during = parse_exposition(
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 9\n'
    )
    s = window_stats(before, after, during=[during])
    assert s is not None and s.running == GaugeStats(4.0, 13 / 3, 9.0, 3)


def test_family_can_be_forced() -> None:
    s = window_stats(*_pair("lab"), family="vllm")
    assert s is not None and s.family == "vllm" and s.requests_finished is None


def test_unknown_metrics_give_none_with_a_warning() -> None:
    warnings: list[str] = []
    plain = parse_exposition("# TYPE up gauge\nup 1\n")
    assert window_stats(plain, plain, warnings=warnings) is None
    assert len(warnings) == 1


def test_an_adapter_can_be_registered() -> None:
    def adapter(window: Snapshot, gauges: object) -> ServerWindowStats:
        return ServerWindowStats(family="custom", requests_finished=window.value("my_requests_total"))

    register_adapter("custom", ("my_",), adapter)
    try:
        before = parse_exposition("# TYPE my_requests counter\nmy_requests_total 1\n")
        after = parse_exposition("# TYPE my_requests counter\nmy_requests_total 6\n")
        s = window_stats(before, after)
        assert s is not None and s.family == "custom" and s.requests_finished == 5.0
    finally:
        del ADAPTERS["custom"]
