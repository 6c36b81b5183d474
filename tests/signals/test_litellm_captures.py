"""LiteLLM's proxy's answers, captured (tests/fixtures/litellm/): its rate limit, trace context and streaming."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from latscope.signals.ratelimit import RateLimitWindow, rate_limit_state
from latscope.signals.traceresponse import returned_trace_ids
from tests.support.httpfile import REAL, load_capture

LITELLM = REAL.parent / "litellm"
NOW = datetime(2026, 12, 2, 13, 19, 36, tzinfo=UTC)  # the captures' Date


def test_litellms_refusal_says_nothing_of_when_to_retry() -> None:
    refusal = load_capture("litellm.chat.ratelimited.http", LITELLM)
    assert refusal.status == 429
    state = rate_limit_state(refusal.headers, NOW)
    assert state.empty and state.retry_after_s is None and state.should_retry is None
    error = json.loads(refusal.body)["error"]
    assert error["code"] == "429" and "No deployments available" in error["message"]


def test_litellms_admitted_answer_carries_the_deployments_rpm_in_openais_names_without_a_reset() -> None:
    admitted = load_capture("litellm.chat.stream.http", LITELLM)
    assert admitted.status == 200
    state = rate_limit_state(admitted.headers, NOW)
    assert state.windows == (RateLimitWindow("requests", limit=2, remaining=0, source="openai"),)
    assert state.retry_after_s is None


def test_litellms_answer_names_the_upstreams_trace_under_its_renamed_header() -> None:
    admitted = load_capture("litellm.chat.stream.http", LITELLM)
    [returned] = returned_trace_ids(admitted.headers)
    assert returned.source == "llm_provider-traceresponse" and returned.authoritative


def test_litellm_streams_each_event_in_an_http_chunk_of_its_own() -> None:
    admitted = load_capture("litellm.chat.stream.http", LITELLM)
    assert admitted.header("x-accel-buffering") == "no"
    assert len(admitted.chunks) > 2
    assert all(chunk.startswith(b"data: ") and chunk.count(b"\n\n") == 1 for chunk in admitted.chunks)


def test_the_upstreams_server_timing_passed_on_by_a_gateway_is_read_when_the_gateway_sends_none() -> None:
    from latscope.signals.join import server_measures
    from latscope.timeline.model import ServerPhase

    upstream = [("llm_provider-server-timing", "queue;dur=12.5, prefill;dur=3")]
    measures = {m.name: m.ms for m in server_measures(headers=upstream)}
    assert measures == {ServerPhase.QUEUE: 12.5, ServerPhase.PREFILL: 3.0}
    # the gateway's own Server-Timing, when it sends one, is what counts
    own = [("server-timing", "total;dur=40"), *upstream]
    assert {m.name for m in server_measures(headers=own)} == {ServerPhase.E2E}
