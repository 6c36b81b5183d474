"""The lab's front door: ``traceresponse`` for every request, and the two faults that sit there
(``drop-trace-context``, ``response-cache``), seen from outside with the measuring client."""

from __future__ import annotations

from latscope.dialects.openai import chat_request
from latscope.dialects.prompts import synthetic_prompt
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.front import trace_response
from latscope.signals.cache import cache_state
from latscope.signals.tracecontext import parse_traceparent
from latscope.wire import Client

#: Prefill of a few ms and a token every 4 ms: a generated answer takes clearly longer than a replayed one.
COST = CostModel.default().with_overrides(prefill_base_ms=5.0, decode_base_ms=4.0)


def test_trace_response_keeps_a_valid_incoming_trace_id_with_a_new_span() -> None:
    incoming = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    out = parse_traceparent(trace_response(incoming).decode())
    assert out is not None
    assert out.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert out.parent_id != "00f067aa0ba902b7" and out.sampled


def test_trace_response_starts_a_new_trace_for_a_missing_or_invalid_traceparent() -> None:
    for incoming in (None, b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", b"garbage"):
        out = parse_traceparent(trace_response(incoming).decode())
        assert out is not None and out.trace_id != "0" * 32


async def test_the_lab_echoes_the_trace_id_it_was_sent() -> None:
    async with Lab(profile="tuned", cost=COST) as lab, Client(trace_context=True) as client:
        t = await client.request(chat_request("lab-model", "hi", 2), lab.url)
        record = lab.records[-1]
    assert t.ok and t.trace_id is not None
    echoed = parse_traceparent(t.response_headers["traceresponse"])
    assert echoed is not None and echoed.trace_id == t.trace_id
    assert record.traceparent is not None and t.trace_id in record.traceparent


async def test_drop_trace_context_strips_the_traceparent_and_answers_a_new_trace() -> None:
    async with Lab(profile="tuned", faults=["drop-trace-context"], cost=COST) as lab, Client() as client:
        t = await client.request(chat_request("lab-model", "hi", 2), lab.url)
        record = lab.records[-1]
    assert t.ok and t.trace_id is not None
    echoed = parse_traceparent(t.response_headers["traceresponse"])
    assert echoed is not None and echoed.trace_id != t.trace_id
    assert record.traceparent is None  # the service behind the edge never saw it


async def test_the_response_cache_replays_a_repeated_request_with_hit_headers_and_nothing_generated() -> None:
    async with Lab(profile="tuned", faults=["response-cache"], cost=COST) as lab:
        async with Client(keep_text=True, trace_context=False) as client:
            spec = chat_request("lab-model", synthetic_prompt(16, 7), 16)
            first = await client.request(spec, lab.url)
            second = await client.request(spec, lab.url)
            other = await client.request(chat_request("lab-model", synthetic_prompt(16, 8), 16), lab.url)
        generated = [r for r in lab.records if r.path == "/v1/chat/completions"]
    assert first.ok and second.ok and other.ok
    assert cache_state(first.response_headers).hit is False
    hit = cache_state(second.response_headers)
    assert hit.hit is True and hit.source == "x-cache" and hit.age_s is not None
    assert cache_state(other.response_headers).hit is False
    assert second.output_text == first.output_text and second.output_text
    assert len(generated) == 2  # the replayed request never reached the service
    first_ttft = first.first_token_ns - first.started_ns  # type: ignore[operator]
    second_ttft = second.first_token_ns - second.started_ns  # type: ignore[operator]
    assert second_ttft * 3 < first_ttft


async def test_the_tuned_lab_has_no_cache_headers_and_generates_every_request() -> None:
    async with Lab(profile="tuned", cost=COST) as lab, Client(trace_context=False) as client:
        spec = chat_request("lab-model", synthetic_prompt(16, 7), 4)
        first = await client.request(spec, lab.url)
        second = await client.request(spec, lab.url)
        generated = [r for r in lab.records if r.path == "/v1/chat/completions"]
    assert first.ok and second.ok
    assert cache_state(second.response_headers).hit is None
    assert len(generated) == 2


async def test_the_silent_response_cache_replays_without_a_header_saying_so() -> None:
    async with Lab(profile="tuned", faults=["silent-response-cache"], cost=COST) as lab:
        async with Client(keep_text=True, trace_context=False) as client:
            spec = chat_request("lab-model", synthetic_prompt(16, 7), 16)
            first = await client.request(spec, lab.url)
            second = await client.request(spec, lab.url)
        hits = lab.cache_hits
    assert first.ok and second.ok and hits == 1
    assert cache_state(first.response_headers).hit is None and cache_state(second.response_headers).hit is None
    assert "age" not in second.response_headers and "x-cache" not in second.response_headers
    assert second.output_text == first.output_text and second.output_text
