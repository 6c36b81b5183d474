"""TGI / OpenAI / Envoy timing headers (units converted to ms) and request ids."""

from __future__ import annotations

import pytest

from latscope.signals.requestid import RequestId, request_id, request_ids
from latscope.signals.timingheaders import tgi_token_counts, timing_header_measures
from latscope.timeline.model import ServerMeasure
from tests.support.httpfile import load_capture

# A TGI non-streaming /generate response's headers (router/src/server.rs).
TGI_HEADERS = [
    ("content-type", "application/json"),
    ("x-compute-type", "gpu+optimized"),
    ("x-compute-time", "0.602419"),
    ("x-compute-characters", "60"),
    ("x-total-time", "602"),
    ("x-validation-time", "1"),
    ("x-queue-time", "0"),
    ("x-inference-time", "601"),
    ("x-time-per-token", "30"),
    ("x-prompt-tokens", "5"),
    ("x-generated-tokens", "20"),
]


def test_tgi_headers_compute_time_is_seconds_the_others_ms() -> None:
    measures = timing_header_measures(TGI_HEADERS)
    assert measures[0].ms == pytest.approx(602.419)
    assert measures == [
        ServerMeasure("e2e", measures[0].ms, "header:x-compute-time"),
        ServerMeasure("e2e", 602.0, "header:x-total-time"),
        ServerMeasure("validate", 1.0, "header:x-validation-time"),
        ServerMeasure("queue", 0.0, "header:x-queue-time"),
        ServerMeasure("inference", 601.0, "header:x-inference-time"),
        ServerMeasure("time_per_token", 30.0, "header:x-time-per-token"),
    ]


def test_tgi_token_counts() -> None:
    assert tgi_token_counts(TGI_HEADERS) == (5, 20)
    assert tgi_token_counts({}) == (None, None)


def test_openai_processing_ms_from_the_real_llama_cpp_python_capture() -> None:
    capture = load_capture("llama-cpp-python.chat.stream.http")
    assert timing_header_measures(capture.headers) == [ServerMeasure("processing", 3.0, "header:openai-processing-ms")]
    assert request_id(capture.headers) == RequestId("x-request-id", "c39c09ebf80c4986aafa626942631886")


def test_envoy_upstream_service_time() -> None:
    measures = timing_header_measures({"x-envoy-upstream-service-time": "87"})
    assert measures == [ServerMeasure("upstream", 87.0, "header:x-envoy-upstream-service-time")]


def test_the_real_llama_server_capture_has_no_timing_headers() -> None:
    assert timing_header_measures(load_capture("llama-server.chat.stream.http").headers) == []


def test_unreadable_values_are_ignored_with_a_warning() -> None:
    warnings: list[str] = []
    measures = timing_header_measures(
        {"x-queue-time": "fast", "x-total-time": "-1", "x-inference-time": "5"}, warnings=warnings
    )
    assert measures == [ServerMeasure("inference", 5.0, "header:x-inference-time")]
    assert len(warnings) == 2
    assert tgi_token_counts({"x-prompt-tokens": "1.5"}, warnings=warnings) == (None, None)
    assert len(warnings) == 3


def test_request_ids_in_preference_order_skipping_empty_values() -> None:
    headers = [("cf-ray", "8f1e2d3c4b5a6978-AMS"), ("request-id", "req_018EeWyXxfu5pfWkrYcMdjWG"), ("x-request-id", "")]
    assert request_ids(headers) == [
        RequestId("request-id", "req_018EeWyXxfu5pfWkrYcMdjWG"),
        RequestId("cf-ray", "8f1e2d3c4b5a6978-AMS"),
    ]
    assert request_id({"X-Amzn-RequestId": "5f2c8b1e-3d4a-4b6c-9e8f-0a1b2c3d4e5f"}) == RequestId(
        "x-amzn-requestid", "5f2c8b1e-3d4a-4b6c-9e8f-0a1b2c3d4e5f"
    )
    assert request_id({}) is None
