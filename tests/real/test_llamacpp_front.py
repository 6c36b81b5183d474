"""The edge checks against a real llama.cpp server (llama-cpp-python, tiny random model), which has no edge: it
returns no trace context (so whether it would propagate one cannot be told) and caches no response (its prompt cache
saves prefill, never the generation)."""

from __future__ import annotations

from latscope.diagnose import diagnose
from latscope.findings import Clear, NotTested
from tests.real.conftest import LlamaServer


async def test_a_server_that_returns_no_trace_id_leaves_trace_context_not_tested(llama_server: LlamaServer) -> None:
    result = await diagnose(llama_server.base_url, quick=True, only="trace-context-dropped")
    outcome = result.outcome("trace-context-dropped")
    assert isinstance(outcome, NotTested) and "no trace id" in outcome.reason, outcome


async def test_a_server_without_a_cache_is_clear_of_cached_responses(llama_server: LlamaServer) -> None:
    result = await diagnose(llama_server.base_url, quick=True, only="response-cached")
    outcome = result.outcome("response-cached")
    assert isinstance(outcome, Clear), outcome


async def test_a_lean_client_of_a_real_server_is_clear_of_header_bloat(llama_server: LlamaServer) -> None:
    result = await diagnose(llama_server.base_url, quick=True, only="request-header-bloat")
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear), outcome
