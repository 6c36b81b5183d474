"""latscope's own client against the lab in every dialect: the same engine answers each API on its usual path, and
the client records the same kind of timeline from each."""

from __future__ import annotations

import pytest

from latscope.dialects import DIALECTS, get_dialect
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.signals.join import join_server_signals
from latscope.timeline import metrics
from latscope.timeline.model import ErrorKind, EventKind
from latscope.wire import Client

QUICK = CostModel.default().with_overrides(
    prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=1.0, decode_per_seq_ms=0.0
)
MODEL = "tiny-lab"


@pytest.mark.parametrize("name", list(DIALECTS))
async def test_every_dialect_streams_and_reports_its_phases(name: str) -> None:
    dialect = get_dialect(name)
    async with Lab(model=MODEL, cost=QUICK, truth=True) as lab, Client() as client:
        base = lab.origin + dialect.base_path
        models, _ = await client.list_models(base, dialect)
        assert models == [MODEL]
        t = await client.request(dialect.build_request(MODEL, "Hello there", 5), base)
        plain = await client.request(dialect.build_request(MODEL, "Hello there", 5, stream=False), base)
    assert t.ok and plain.ok, (t.error, plain.error)
    assert t.usage is not None and t.usage.completion_tokens == 5 == metrics.output_tokens(plain)
    assert sum(e.tokens for e in t.events if e.kind is EventKind.CONTENT) == 5
    assert t.first_text_ns == t.first_token_ns is not None
    assert t.finish_reason is not None and t.warnings == []
    assert all(e.server_sent_ns is not None for e in t.events if e.kind is EventKind.CONTENT)  # --truth stamps
    join_server_signals(t)
    assert t.server_ms("prefill") is not None and t.server_ms("queue") is not None


@pytest.mark.parametrize("name", list(DIALECTS))
async def test_every_dialect_gets_a_bad_request_as_an_http_status_error(name: str) -> None:
    dialect = get_dialect(name)
    async with Lab(model=MODEL, cost=QUICK) as lab, Client() as client:
        t = await client.request(dialect.build_request(MODEL, "Hello", 0), lab.origin + dialect.base_path)
    assert t.error is not None and t.error.kind is ErrorKind.HTTP_STATUS
    assert t.error.status in (400, 422) and "1" in t.error.message  # "expected a value >= 1" in the API's own shape


async def test_an_anthropic_tool_call_streams_tool_call_tokens_and_no_text() -> None:
    dialect = get_dialect("anthropic.messages")
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    spec = dialect.build_request(MODEL, "Weather?", 4, extra={"tools": tools, "tool_choice": {"type": "any"}})
    async with Lab(model=MODEL, cost=QUICK) as lab, Client() as client:
        t = await client.request(spec, lab.origin + dialect.base_path)
    assert t.ok and t.finish_reason == "tool_use"
    assert [e.kind for e in t.events].count(EventKind.TOOL_CALL) == 4
    assert t.first_token_ns is not None and t.first_text_ns is None and metrics.ttft_text_ms(t) is None
    assert len(metrics.itl_ms(t, EventKind.TOOL_CALL)) == 3


async def test_the_anthropic_key_goes_in_x_api_key_and_the_lab_checks_it() -> None:
    dialect = get_dialect("anthropic.messages")
    spec = dialect.build_request(MODEL, "Hello", 2)
    async with Lab(model=MODEL, cost=QUICK, api_key="k-123") as lab, Client() as client:
        base = lab.origin + dialect.base_path
        good = await client.request(spec, base, headers=dialect.credential_headers("k-123"))
        bad = await client.request(spec, base, headers=dialect.credential_headers("wrong"))
    assert good.ok and good.request_headers.get("x-api-key") != "k-123"  # redacted in the record
    assert bad.error is not None and bad.error.status == 401


async def test_anthropic_thinking_is_reasoning_and_the_text_comes_later() -> None:
    dialect = get_dialect("anthropic.messages")
    spec = dialect.build_request(MODEL, "Think", 8, extra={"thinking": {"type": "enabled", "budget_tokens": 5}})
    async with Lab(model=MODEL, cost=QUICK) as lab, Client() as client:
        t = await client.request(spec, lab.origin + dialect.base_path)
    assert t.ok and [e.kind for e in t.events if e.tokens] == [EventKind.REASONING] * 5 + [EventKind.CONTENT] * 3
    ttft, ttft_text = metrics.ttft_ms(t), metrics.ttft_text_ms(t)
    assert ttft is not None and ttft_text is not None and ttft_text > ttft  # five tokens of thinking first
    assert len(metrics.itl_ms(t, EventKind.REASONING)) == 4 and len(metrics.itl_ms(t, EventKind.CONTENT)) == 2
    assert len(metrics.itl_ms(t)) == 6  # the switch from thinking to text is not an inter-token gap


async def test_an_openai_chat_tool_call_streams_tool_call_tokens() -> None:
    dialect = get_dialect("openai.chat")
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    spec = dialect.build_request(MODEL, "Weather?", 4, extra={"tools": tools, "tool_choice": "required"})
    async with Lab(model=MODEL, cost=QUICK) as lab, Client() as client:
        t = await client.request(spec, lab.origin + dialect.base_path)
    assert t.ok and t.finish_reason == "tool_calls"
    assert [e.kind for e in t.events if e.tokens] == [EventKind.TOOL_CALL] * 5  # named, then four argument pieces
    assert t.first_text_ns is None and t.usage is not None and t.usage.completion_tokens == 4


async def test_a_responses_function_call_streams_tool_call_tokens() -> None:
    dialect = get_dialect("openai.responses")
    tools = [{"type": "function", "name": "get_weather"}]
    spec = dialect.build_request(MODEL, "Weather?", 4, extra={"tools": tools, "tool_choice": "required"})
    async with Lab(model=MODEL, cost=QUICK) as lab, Client() as client:
        t = await client.request(spec, lab.origin + dialect.base_path)
    assert t.ok and [e.kind for e in t.events if e.tokens] == [EventKind.TOOL_CALL] * 4
    assert t.first_text_ns is None and t.usage is not None and t.usage.completion_tokens == 4
