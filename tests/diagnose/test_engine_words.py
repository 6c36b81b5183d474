"""The engine that answered, and fixes in its own words: a finding about a setting of vLLM names vLLM's flag, one of
llama.cpp names llama.cpp's, an unknown engine keeps the catalogue's words; and vLLM is asked to list each event's
token ids, so an event it merged from several tokens counts them all.

The engine is told by its ``/metrics`` (here vLLM's real exposition, replayed byte for byte on a real socket) or by
llama.cpp's ``server`` header."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from latscope.checks.engineknobs import ENGINE_FIXES, engine_fix
from latscope.diagnose.context import REQUEST_TIMEOUTS, Context
from latscope.diagnose.discovery import identify_engine, token_count_fields
from latscope.diagnose.runner import in_engine_words
from latscope.findings import CATALOGUE, Clear, Confidence, Finding, Severity, make_finding
from latscope.timeline.model import Timeline
from latscope.wire.target import Target

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


@asynccontextmanager
async def replaying(metrics: bytes | None) -> AsyncIterator[str]:
    """A server on loopback that answers ``GET /metrics`` with ``metrics`` (a whole captured response), or 404."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET /metrics ") and metrics is not None:
            writer.write(metrics)
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


def _context(url: str) -> Context:
    return Context(target=Target.resolve(url, timeouts=REQUEST_TIMEOUTS), model="tiny")


async def test_vllms_metrics_name_the_engine() -> None:
    async with replaying((REAL / "vllm.metrics.http").read_bytes()) as url:
        assert await identify_engine(_context(url), Timeline()) == "vllm"


async def test_llama_cpps_server_header_names_it_where_there_are_no_metrics() -> None:
    first = Timeline(response_headers={"server": "llama.cpp"})
    async with replaying(None) as url:
        assert await identify_engine(_context(url), first) == "llamacpp"
        assert await identify_engine(_context(url), Timeline(response_headers={"server": "uvicorn"})) is None


def _finding(finding_id: str) -> Finding:
    return make_finding(
        finding_id,
        severity=Severity.HIGH,
        cost_ms=100.0,
        cost_basis="ms",
        evidence={},
        rule="r",
        confidence=Confidence.HIGH,
    )


def test_a_finding_about_an_engine_setting_names_that_engines_flag() -> None:
    finding = _finding("queue-head-of-line")
    assert finding.fix == CATALOGUE["queue-head-of-line"].fix
    vllm = in_engine_words(finding, "vllm")
    assert isinstance(vllm, Finding)
    assert "--long-prefill-token-threshold" in vllm.fix and "--scheduling-policy priority" in vllm.fix
    llamacpp = in_engine_words(finding, "llamacpp")
    assert isinstance(llamacpp, Finding) and "--parallel" in llamacpp.fix
    assert in_engine_words(finding, None) == finding
    assert in_engine_words(finding, "sglang") == finding


def test_outcomes_that_are_not_findings_are_left_alone() -> None:
    clear = Clear("capacity-saturation", "nothing waited")
    assert in_engine_words(clear, "vllm") is clear


def test_every_engine_fix_is_for_a_catalogue_id() -> None:
    assert set(ENGINE_FIXES) <= set(CATALOGUE)
    fix = engine_fix("capacity-saturation", "vllm")
    assert fix is not None and "--max-num-seqs" in fix


def test_vllm_is_asked_for_token_ids_on_its_openai_routes_only() -> None:
    assert token_count_fields("vllm", "openai.chat") == {"return_token_ids": True}
    assert token_count_fields("vllm", "openai.completions") == {"return_token_ids": True}
    assert token_count_fields("vllm", "anthropic.messages") == {}
    assert token_count_fields("llamacpp", "openai.chat") == {}
    assert token_count_fields(None, "openai.chat") == {}


def test_the_context_adds_the_engines_fields_to_every_request() -> None:
    ctx = _context("http://127.0.0.1:9/v1")
    ctx.request_extra = token_count_fields("vllm", ctx.dialect.name)
    spec = ctx.spec(16, 4)
    assert b'"return_token_ids":true' in spec.body
    padded = ctx.spec(16, 4, extra={"user": "x"})
    assert b'"return_token_ids":true' in padded.body and b'"user":"x"' in padded.body
