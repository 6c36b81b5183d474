"""`probe` against a real llama.cpp server (llama-cpp-python): complete timelines, real framing, real quirks."""

from __future__ import annotations

from latscope.probe import probe
from latscope.timeline import EventKind, metrics
from tests.real.conftest import LlamaServer


async def test_probe_records_complete_timelines_from_llama_cpp(llama_server: LlamaServer) -> None:
    result = await probe(llama_server.base_url, max_tokens=24, n=3, prompt_tokens=32)
    assert result.ok, [t.error for t in result.timelines] + [llama_server.log_tail()]
    assert len(result.timelines) == 3
    for t in result.timelines:
        assert t.status == 200
        assert t.first_byte_ns is not None and t.first_token_ns is not None and t.ended_ns is not None
        assert t.started_ns <= t.first_byte_ns <= t.first_token_ns <= t.last_token_ns <= t.ended_ns  # type: ignore[operator]
        assert t.reads and t.events
        # llama-cpp-python streams one SSE event per token and ends with [DONE]
        assert t.events[-1].kind is EventKind.DONE
        assert t.response_headers.get("x-accel-buffering") == "no"


async def test_token_count_matches_what_llama_cpp_generated(llama_server: LlamaServer) -> None:
    # llama-cpp-python ignores include_usage in streams, so compare against its non-streamed usage for the same
    # deterministic request (temperature 0, same seed) — the server's own count.
    from latscope.dialects import openai
    from latscope.wire import Client

    async with Client() as client:
        streamed = await client.request(
            openai.chat_request(llama_server.model, "the of and to in is you that", 20, temperature=0.0, seed=1),
            llama_server.base_url,
        )
        plain = await client.request(
            openai.chat_request(
                llama_server.model, "the of and to in is you that", 20, stream=False, temperature=0.0, seed=1
            ),
            llama_server.base_url,
        )
    assert streamed.ok and plain.ok, (streamed.error, plain.error)
    assert plain.usage is not None and plain.usage.completion_tokens is not None
    token_events = [e for e in streamed.events if e.kind is EventKind.CONTENT]
    assert len(token_events) == plain.usage.completion_tokens


async def test_second_request_reuses_the_connection(llama_server: LlamaServer) -> None:
    result = await probe(llama_server.base_url, max_tokens=8, n=2)
    first, second = result.timelines
    assert first.connection is not None and second.connection is not None
    assert not first.connection.reused
    assert second.connection.reused and second.connection.connection_id == first.connection.connection_id
    assert metrics.connect_ms(second) is None
