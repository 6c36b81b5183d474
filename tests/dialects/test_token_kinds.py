"""Every token counts: tool-call argument deltas and reasoning deltas are tokens of their own kind, every choice of
an ``n > 1`` stream is kept, TTFT is measured to the first token of any kind and to the first text, ITL keeps the
kinds and choices apart, and the serialised timeline carries it all (schema 2, schema 1 still read)."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import metrics
from latscope.timeline.model import TOKEN_KINDS, EventKind, StreamEvent, Timeline
from latscope.timeline.serialize import SCHEMA, TimelineFormatError, dumps, loads, timeline_from_dict

C, RE, T = EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL


def sse(*objects: object) -> bytes:
    return b"".join(b"data: " + (o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n\n" for o in objects)


def chunk(delta: dict[str, object], index: int = 0) -> dict[str, object]:
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": index, "delta": delta}]}


def test_tool_call_argument_deltas_are_tool_call_tokens() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    piece = {"index": 0, "function": {"arguments": '{"city":'}}
    decoder = OpenAIStreamDecoder("chat")
    chunks = decoder.feed(sse(chunk({"tool_calls": [call]}), chunk({"tool_calls": [piece]}), b"[DONE]"))
    assert [(c.kind, c.text, c.tokens) for c in chunks[:2]] == [(T, "", 1), (T, '{"city":', 1)]
    assert decoder.warnings == []


def test_tool_calls_that_are_not_a_list_of_calls_are_an_unknown_shape() -> None:
    decoder = OpenAIStreamDecoder("chat")
    (only,) = decoder.feed(sse(chunk({"tool_calls": 5})))
    assert only.kind is EventKind.OTHER and decoder.warnings


def test_each_choice_of_an_n_2_stream_keeps_its_index() -> None:
    decoder = OpenAIStreamDecoder("chat")
    stream = sse(*(chunk({"content": f"w{i}"}, index=i % 2) for i in range(8)))
    chunks = decoder.feed(stream)
    assert [c.choice for c in chunks] == [0, 1] * 4
    assert [c.text for c in chunks if c.choice == 1] == ["w1", "w3", "w5", "w7"]


def test_the_template_fast_path_keeps_the_choice() -> None:
    decoder = OpenAIStreamDecoder("chat")
    one_by_one = [c for i in range(40) for c in decoder.feed(sse(chunk({"content": f"t{i}"}, index=3)))]
    assert {c.choice for c in one_by_one} == {3}
    batched = decoder.feed(sse(*(chunk({"content": f"u{i}"}, index=3) for i in range(10))))
    assert {c.choice for c in batched} == {3} and len(batched) == 10


def test_tool_call_is_a_token_kind() -> None:
    assert T in TOKEN_KINDS and T.carries_tokens and not EventKind.FINISH.carries_tokens


def event(at_ms: int, kind: EventKind, choice: int = 0) -> StreamEvent:
    return StreamEvent(at_ms * 1_000_000, 0, kind, 1, 1, None, choice)


def reasoning_then_text() -> Timeline:
    t = Timeline(started_ns=0)
    t.events = [event(10, RE), event(12, RE), event(14, RE), event(50, C), event(51, C), event(53, C)]
    t.first_token_ns, t.first_text_ns, t.last_token_ns, t.ended_ns = 10_000_000, 50_000_000, 53_000_000, 60_000_000
    return t


def test_ttft_is_to_any_token_and_ttft_text_to_the_first_text() -> None:
    t = reasoning_then_text()
    assert metrics.ttft_ms(t) == 10.0 and metrics.ttft_text_ms(t) == 50.0


def test_itl_keeps_the_kinds_apart() -> None:
    t = reasoning_then_text()
    assert metrics.itl_ms(t) == [2.0, 2.0, 1.0, 2.0]  # not the 36 ms switch from reasoning to text
    assert metrics.itl_ms(t, C) == [1.0, 2.0] and metrics.itl_ms(t, RE) == [2.0, 2.0]


def test_itl_keeps_the_choices_apart() -> None:
    t = Timeline(started_ns=0)
    t.events = [event(10, C, 0), event(11, C, 1), event(20, C, 0), event(22, C, 1)]
    assert metrics.itl_ms(t) == [10.0, 11.0]


def test_an_event_of_several_tokens_spreads_its_gap_over_them() -> None:
    """vLLM merges tokens into one event when its API server falls behind; with ``return_token_ids`` the event says
    how many: 3 tokens arriving 12 ms after the last are 3 gaps of 4 ms, not one gap of 12 ms and two lost."""
    t = Timeline(started_ns=0)
    t.events = [
        StreamEvent(10_000_000, 0, C, 1, 2, None, 0),  # a first event of 2 tokens: its extra one adds no gap
        StreamEvent(13_000_000, 1, C, 1, 1, None, 0),
        StreamEvent(25_000_000, 2, C, 1, 3, None, 0),
    ]
    assert metrics.itl_ms(t) == [3.0, 4.0, 4.0, 4.0]


def test_timeline_round_trips_choice_kind_and_first_text() -> None:
    t = reasoning_then_text()
    t.events.append(event(55, T, 2))
    again = loads(dumps(t))
    assert again.events == t.events and again.first_text_ns == t.first_text_ns
    assert orjson.loads(dumps(t))["schema"] == SCHEMA == "latscope.timeline/2"


def test_a_schema_1_record_still_reads_with_choice_0() -> None:
    record = orjson.loads(dumps(reasoning_then_text()))
    record["schema"] = "latscope.timeline/1"
    record["events"] = [item[:6] for item in record["events"]]
    del record["marks"]["first_text_ns"]
    old = timeline_from_dict(record)
    assert [e.choice for e in old.events] == [0] * 6 and old.first_text_ns is None


def test_an_unknown_schema_is_refused_by_name() -> None:
    with pytest.raises(TimelineFormatError, match=r"latscope\.timeline/1"):
        timeline_from_dict({"schema": "latscope.timeline/9", "url": ""})
