"""Prometheus exposition parsing, snapshots, deltas and histogram quantiles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.signals.prometheus import Histogram, delta, histogram_quantile, parse_exposition
from tests.support.httpfile import load_capture

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def _llama_capture() -> str:
    return load_capture("llama-server.metrics.http").body.decode()


def test_real_llama_server_metrics_are_parsed_with_colons_in_names() -> None:
    warnings: list[str] = []
    snap = parse_exposition(_llama_capture(), taken_at_s=12.5, warnings=warnings)
    assert warnings == []
    assert snap.taken_at_s == 12.5
    assert len(snap.families) == 15
    assert snap.families["llamacpp:prompt_tokens"].type == "counter"
    assert snap.value("llamacpp:prompt_tokens_total") == 70.0
    assert snap.value("llamacpp:prompt_seconds_total") == 0.018986
    assert snap.value("llamacpp:requests_deferred") == 0.0
    assert snap.type_of("llamacpp:n_busy_slots_per_decode") == "gauge"


def test_a_counter_is_found_with_or_without_its_total_suffix() -> None:
    snap = parse_exposition(_llama_capture())
    # llama.cpp declares `llamacpp:n_tokens_max` a counter without `_total`; TGI's exporter does the same.
    assert snap.value("llamacpp:n_tokens_max") == snap.value("llamacpp:n_tokens_max_total") == 72.0
    assert snap.value("llamacpp:prompt_tokens") == 70.0
    tgi = parse_exposition(_fixture("tgi.after.prom"))
    assert tgi.value("tgi_request_success") == tgi.value("tgi_request_success_total") == 3.0


def test_created_series_are_dropped() -> None:
    snap = parse_exposition(_fixture("lab.after.prom"))
    assert not any(name.endswith("_created") for name in snap.sample_names())
    assert snap.value("latscope_lab_preemptions_total") == 2.0


def test_a_histogram_whose_name_ends_in_total_is_a_histogram() -> None:
    snap = parse_exposition(_fixture("vllm.after.prom"))
    assert snap.type_of("vllm:iteration_tokens_total_bucket") == "histogram"
    hist = snap.histogram("vllm:iteration_tokens_total")
    assert hist is not None and hist.count == 63.0 and hist.sum == 496.0
    assert hist.buckets[-1] == (math.inf, 63.0)


def test_values_filtered_by_labels_and_grouped_by_a_label() -> None:
    snap = parse_exposition(_fixture("vllm.after.prom"))
    assert snap.value("vllm:request_success_total", {"finished_reason": "stop"}) == 5.0
    assert snap.by_label("vllm:request_success", "finished_reason") == {"stop": 5.0, "length": 1.0, "abort": 0.0}
    assert snap.value("vllm:request_success", {"finished_reason": "cancelled"}) is None
    assert snap.value("vllm:no_such_metric") is None


TWO_ENGINES = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 3.5
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="1",le="1.0",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0
vllm:e2e_request_latency_seconds_sum{engine="1",model_name="m"} 0.5
vllm:e2e_request_latency_seconds_count{engine="1",model_name="m"} 1.0
"""


def test_aggregation_over_label_sets() -> None:
    snap = parse_exposition(TWO_ENGINES)
    assert snap.value("vllm:kv_cache_usage_perc", aggregate="mean") == pytest.approx(0.4)
    assert snap.value("vllm:kv_cache_usage_perc", aggregate="max") == 0.6
    assert snap.value("vllm:kv_cache_usage_perc", {"engine": "1"}) == 0.6
    merged = snap.histogram("vllm:e2e_request_latency_seconds")
    assert merged == Histogram(((1.0, 3.0), (math.inf, 4.0)), 4.0, 4.0)
    assert merged.mean == 1.0
    assert snap.histogram("vllm:e2e_request_latency_seconds", {"engine": "1"}) == Histogram(
        ((1.0, 1.0), (math.inf, 1.0)), 0.5, 1.0
    )
    assert snap.mean("vllm:e2e_request_latency_seconds") == 1.0


def test_delta_of_two_snapshots_per_label_set() -> None:
    before = parse_exposition(_fixture("vllm.before.prom"), taken_at_s=100.0)
    after = parse_exposition(_fixture("vllm.after.prom"), taken_at_s=112.5)
    warnings: list[str] = []
    window = delta(before, after, warnings=warnings)
    assert warnings == []
    assert window.is_delta and window.interval_s == 12.5
    assert window.by_label("vllm:request_success", "finished_reason") == {"stop": 3.0, "length": 1.0, "abort": 0.0}
    assert window.value("vllm:prompt_tokens") == 400.0
    assert window.mean("vllm:request_queue_time_seconds") == pytest.approx(0.025)
    hist = window.histogram("vllm:request_queue_time_seconds")
    assert hist is not None and hist.count == 4.0 and dict(hist.buckets)[0.3] == 4.0
    assert window.value("vllm:num_requests_running") is None  # gauges are not differenced


def test_delta_counts_new_series_from_zero_and_handles_counter_resets() -> None:
    before = parse_exposition('# TYPE c counter\nc_total{a="x"} 10\n# TYPE h histogram\nh_sum 5\nh_count 5\n')
    after = parse_exposition(
        '# TYPE c counter\nc_total{a="x"} 4\nc_total{a="y"} 2\n# TYPE h histogram\nh_sum 7\nh_count 6\n'
    )
    warnings: list[str] = []
    window = delta(before, after, warnings=warnings)
    assert window.series("c") == {(("a", "x"),): 4.0, (("a", "y"),): 2.0}
    assert window.mean("h") == 2.0
    assert len(warnings) == 1 and "reset" in warnings[0]


def test_delta_from_an_empty_snapshot_warns() -> None:
    warnings: list[str] = []
    window = delta(parse_exposition(""), parse_exposition(_llama_capture()), warnings=warnings)
    assert window.value("llamacpp:prompt_tokens") == 70.0
    assert len(warnings) == 1


def test_untyped_samples_with_counter_suffixes_are_differenced() -> None:
    window = delta(parse_exposition("jobs_total 3\nload 1\n"), parse_exposition("jobs_total 5\nload 9\n"))
    assert window.value("jobs_total") == 2.0
    assert window.value("load") is None


def test_malformed_lines_are_dropped_with_warnings_and_the_rest_is_kept() -> None:
    text = (
        '# HELP good A gauge.\n# TYPE good gauge\ngood{x="1"} 1\n'
        'broken{x="1" 2\n'
        "# TYPE c counter\nc_total 3\nc_total{ 4\n"
        "# TYPE g gauge\ng NaN\n"
    )
    warnings: list[str] = []
    snap = parse_exposition(text, warnings=warnings)
    assert snap.value("good") == 1.0
    assert snap.value("c") == 3.0
    assert snap.value("g") is None
    assert len(warnings) == 3


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    parse_exposition(text, warnings=[])


def test_openmetrics_text_is_read_with_its_own_parser() -> None:
    text = (
        "# TYPE requests counter\n"
        'requests_total{path="/v1"} 7.0\n'
        'requests_created{path="/v1"} 1.7e+09\n'
        "# TYPE latency histogram\n"
        'latency_bucket{le="0.5"} 1.0\n'
        'latency_bucket{le="+Inf"} 2.0\n'
        "latency_count 2.0\n"
        "latency_sum 1.5\n"
        "# EOF\n"
    )
    warnings: list[str] = []
    snap = parse_exposition(text, warnings=warnings)
    assert warnings == []
    assert snap.value("requests") == 7.0
    assert "requests_created" not in snap.sample_names()
    assert snap.mean("latency") == 0.75


def test_invalid_openmetrics_falls_back_to_the_text_format() -> None:
    warnings: list[str] = []
    snap = parse_exposition("# TYPE c counter\nc 1\n# EOF\n", warnings=warnings)  # OpenMetrics wants c_total
    assert snap.value("c") == 1.0
    assert len(warnings) == 1


# Quantiles.


def test_quantile_interpolates_linearly_inside_the_bucket() -> None:
    buckets = [(1.0, 10.0), (2.0, 20.0), (math.inf, 20.0)]
    assert histogram_quantile(0.75, buckets) == 1.5  # rank 15: halfway through the (1, 2] bucket
    assert histogram_quantile(0.25, buckets) == 0.5  # the first bucket starts at 0
    assert histogram_quantile(1.0, buckets) == 2.0


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert histogram_quantile(0.9, [(1.0, 5.0), (math.inf, 10.0)]) == 1.0


def test_quantile_needs_an_inf_bucket_and_observations() -> None:
    assert histogram_quantile(0.5, [(1.0, 5.0), (2.0, 6.0)]) is None
    assert histogram_quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, [(math.inf, 3.0)]) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, [(1.0, 1.0), (math.inf, 1.0)])


def test_quantile_forces_counts_monotonic_and_accepts_any_bucket_order() -> None:
    buckets = [(math.inf, 10.0), (2.0, 9.0), (1.0, 10.0)]  # the 2.0 count dipped below the 1.0 count
    assert histogram_quantile(0.5, buckets) == 0.5


def test_quantile_of_a_negative_first_bound_returns_that_bound() -> None:
    assert histogram_quantile(0.1, [(-1.0, 5.0), (0.0, 10.0), (math.inf, 10.0)]) == -1.0


def test_quantiles_of_a_known_distribution() -> None:
    rng = np.random.default_rng(20250115)
    samples = rng.exponential(scale=0.2, size=200_000)  # TTFTs in seconds, mean 200 ms
    bounds = [0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, math.inf]
    buckets = [(bound, float(np.count_nonzero(samples <= bound))) for bound in bounds]
    for q in (0.5, 0.9, 0.99):
        estimate = histogram_quantile(q, buckets)
        truth = float(np.quantile(samples, q))
        lower = max((b for b in bounds if b <= truth), default=0.0)
        upper = min(b for b in bounds if b >= truth)
        assert estimate is not None and lower <= estimate <= upper  # never outside the true quantile's bucket
        assert estimate == pytest.approx(truth, rel=0.05)
    hist = Histogram(tuple(buckets), float(samples.sum()), float(len(samples)))
    assert hist.mean == pytest.approx(0.2, rel=0.01)
    assert hist.quantile(0.5) == histogram_quantile(0.5, buckets)
