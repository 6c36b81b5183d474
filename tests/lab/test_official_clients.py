"""Official clients nobody here wrote, against the lab: each API's own SDK gets well-formed answers, streamed and not,
and raises its own error types for bad requests. If the lab's bytes drift from an API's shape, these fail."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
ollama = pytest.importorskip("ollama")
text_generation = pytest.importorskip("text_generation")

#: Fast steps so streams of a few tokens take milliseconds.
QUICK = CostModel.default().with_overrides(
    prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=1.0, decode_per_seq_ms=0.0
)
MODEL = "tiny-lab"
KEY = "lab-key-1234"


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    async with Lab(model=MODEL, cost=QUICK, api_key=KEY) as running:
        yield running


# -- openai ---------------------------------------------------------------------------------------------------------


async def test_openai_chat_streamed_and_not(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY)
    answer = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=4
    )
    assert answer.choices[0].message.content and answer.usage is not None and answer.usage.completion_tokens == 4
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    texts = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert len(texts) == 4
    await client.close()


FUNCTION = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
}


async def test_openai_chat_tool_calls_streamed_and_not(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY)
    forced = {"type": "function", "function": {"name": "get_weather"}}
    messages = [{"role": "user", "content": "Weather?"}]
    answer = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, tools=[FUNCTION], tool_choice=forced
    )
    call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert answer.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments)["text"]
    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, tools=[FUNCTION], tool_choice=forced, stream=True
    )
    pieces = [
        chunk.choices[0].delta.tool_calls[0].function.arguments
        async for chunk in stream
        if chunk.choices and chunk.choices[0].delta.tool_calls
    ]
    assert pieces[0] == "" and len(pieces) == 5  # the call named, then one piece per token
    assert orjson.loads("".join(p or "" for p in pieces))["text"]
    await client.close()


async def test_openai_completions_streamed_and_not(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY)
    answer = await client.completions.create(model=MODEL, prompt="Once", max_tokens=3)
    assert answer.choices[0].text and answer.choices[0].finish_reason == "length"
    stream = await client.completions.create(model=MODEL, prompt="Once", max_tokens=3, stream=True)
    assert len([chunk async for chunk in stream if chunk.choices and chunk.choices[0].text]) == 3
    await client.close()


async def test_openai_responses_streamed_and_not(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY)
    answer = await client.responses.create(model=MODEL, input="Hello", max_output_tokens=5)
    assert answer.output_text and answer.usage is not None and answer.usage.output_tokens == 5
    stream = await client.responses.create(model=MODEL, input="Hello", max_output_tokens=5, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created"
    assert kinds.count("response.output_text.delta") == 5
    assert kinds[-1] in ("response.completed", "response.incomplete")
    await client.close()


async def test_openai_responses_function_call_streamed_and_not(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY)
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    forced = {"type": "function", "name": "get_weather"}
    answer = await client.responses.create(
        model=MODEL, input="Weather?", max_output_tokens=4, tools=tools, tool_choice=forced
    )
    call = answer.output[0]
    assert call.type == "function_call" and call.name == "get_weather" and orjson.loads(call.arguments)["text"]
    stream = await client.responses.create(
        model=MODEL, input="Weather?", max_output_tokens=4, tools=tools, tool_choice=forced, stream=True
    )
    events = [event async for event in stream]
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) == 4 and orjson.loads("".join(pieces))["text"]
    assert events[-1].type == "response.completed"
    await client.close()


async def test_openai_errors_have_the_sdks_types(lab: Lab) -> None:
    client = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(model=MODEL, input="x", max_output_tokens=0)
    wrong = openai.AsyncOpenAI(base_url=lab.origin + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await wrong.completions.create(model=MODEL, prompt="x", max_tokens=1)
    await client.close()
    await wrong.close()


# -- anthropic ------------------------------------------------------------------------------------------------------


async def test_anthropic_messages_not_streamed(lab: Lab) -> None:
    client = anthropic.AsyncAnthropic(base_url=lab.origin, api_key=KEY)
    message = await client.messages.create(
        model=MODEL, max_tokens=4, system="Be brief.", messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 4
    await client.close()


async def test_anthropic_messages_streamed(lab: Lab) -> None:
    client = anthropic.AsyncAnthropic(base_url=lab.origin, api_key=KEY)
    async with client.messages.stream(
        model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert len(texts) == 6
    assert final.content[0].text == "".join(texts)  # type: ignore[union-attr]
    assert final.usage.output_tokens == 6 and final.usage.input_tokens > 0
    await client.close()


WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


async def test_anthropic_tool_use_streamed_and_not(lab: Lab) -> None:
    client = anthropic.AsyncAnthropic(base_url=lab.origin, api_key=KEY)
    forced = {"type": "tool", "name": "get_weather"}
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    message = await client.messages.create(
        model=MODEL, max_tokens=5, messages=messages, tools=[WEATHER], tool_choice=forced
    )
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use" and message.content[0].name == "get_weather"
    async with client.messages.stream(
        model=MODEL, max_tokens=5, messages=messages, tools=[WEATHER], tool_choice=forced
    ) as stream:
        pieces = [event.partial_json async for event in stream if event.type == "input_json"]
        final = await stream.get_final_message()
    assert len(pieces) == 5
    block = final.content[0]
    assert block.type == "tool_use" and isinstance(block.input, dict)
    assert block.input["text"]  # the streamed pieces made one valid JSON object
    await client.close()


async def test_anthropic_extended_thinking_streams_thinking_then_text(lab: Lab) -> None:
    client = anthropic.AsyncAnthropic(base_url=lab.origin, api_key=KEY)
    thinking = {"type": "enabled", "budget_tokens": 4}
    messages = [{"role": "user", "content": "Think first."}]
    async with client.messages.stream(model=MODEL, max_tokens=7, messages=messages, thinking=thinking) as stream:
        kinds = [event.type async for event in stream if event.type in ("thinking", "text")]
        final = await stream.get_final_message()
    assert kinds == ["thinking"] * 4 + ["text"] * 3
    assert [block.type for block in final.content] == ["thinking", "text"]
    plain = await client.messages.create(model=MODEL, max_tokens=7, messages=messages, thinking=thinking)
    assert [block.type for block in plain.content] == ["thinking", "text"]
    await client.close()


async def test_anthropic_errors_have_the_sdks_types(lab: Lab) -> None:
    client = anthropic.AsyncAnthropic(base_url=lab.origin, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model=MODEL, max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="nope", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    wrong = anthropic.AsyncAnthropic(base_url=lab.origin, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        await wrong.messages.create(model=MODEL, max_tokens=1, messages=[{"role": "user", "content": "x"}])
    await client.close()
    await wrong.close()


# -- ollama ---------------------------------------------------------------------------------------------------------


async def test_ollama_chat_and_generate_streamed_and_not(lab: Lab) -> None:
    client = ollama.AsyncClient(host=lab.origin, headers={"Authorization": f"Bearer {KEY}"})
    answer = await client.chat(
        model=MODEL, messages=[{"role": "user", "content": "Hello"}], stream=False, options={"num_predict": 3}
    )
    assert answer.message.content and answer.done and answer.eval_count == 3
    assert answer.prompt_eval_duration is not None and answer.eval_duration is not None
    streamed = await client.generate(model=MODEL, prompt="Once", options={"num_predict": 4}, stream=True)
    parts = [part async for part in streamed]
    assert parts[-1].done and parts[-1].done_reason == "length"
    assert len([part for part in parts if part.response]) == 4
    listed = await client.list()
    assert [model.model for model in listed.models] == [MODEL]


async def test_ollama_errors_have_the_sdks_type(lab: Lab) -> None:
    client = ollama.AsyncClient(host=lab.origin, headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(ollama.ResponseError) as missing:
        await client.chat(model="nope", messages=[{"role": "user", "content": "x"}], stream=False)
    assert missing.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as bad:
        await client.generate(model=MODEL, prompt="x", options={"num_predict": 0}, stream=False)
    assert bad.value.status_code == 400 and "num_predict" in bad.value.error


# -- text-generation (TGI's client) ---------------------------------------------------------------------------------


async def test_text_generation_generate_and_stream(lab: Lab) -> None:
    client = text_generation.AsyncClient(lab.origin, headers={"Authorization": f"Bearer {KEY}"})
    answer = await client.generate("Once", max_new_tokens=3)
    assert answer.generated_text and answer.details.generated_tokens == 3
    responses = [response async for response in client.generate_stream("Once", max_new_tokens=5)]
    assert len(responses) == 5
    assert responses[-1].details is not None and responses[-1].details.generated_tokens == 5
    assert responses[-1].generated_text == "".join(response.token.text for response in responses)


async def test_text_generation_validation_error(lab: Lab) -> None:
    client = text_generation.AsyncClient(lab.origin, headers={"Authorization": f"Bearer {KEY}"})
    with pytest.raises(text_generation.errors.ValidationError):
        await client.generate("Once", max_new_tokens=0)
