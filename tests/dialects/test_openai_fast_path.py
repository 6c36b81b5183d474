"""The decoder's per-mode fast paths are shortcuts only: on any chunk shape they agree with the general decoding."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from latscope.dialects.openai import _UNPARSED, OpenAIStreamDecoder
from latscope.sse import SSEEvent

INTS = st.integers(-(2**40), 2**40)  # orjson writes 64-bit integers only
TEXT = st.one_of(st.none(), st.just(""), st.text(max_size=5), INTS, st.lists(INTS, max_size=1))
FINISH = st.one_of(st.none(), st.sampled_from(["stop", "length"]), INTS)
USAGE = st.one_of(st.none(), st.fixed_dictionaries({"completion_tokens": st.integers(0, 9)}), st.just("x"))
LAB = st.one_of(st.fixed_dictionaries({"sent_ns": st.one_of(INTS, st.text(max_size=2))}), st.just(1))


@st.composite
def chunk_objects(draw: st.DrawFn) -> object:
    delta: dict[str, object] = {}
    for key in ("content", "reasoning_content", "reasoning", "role"):
        if draw(st.booleans()):
            delta[key] = draw(TEXT)
    choice: dict[str, object] = {"index": 0}
    if draw(st.booleans()):
        choice["delta"] = draw(st.one_of(st.just(delta), st.none()))
    if draw(st.booleans()):
        choice["text"] = draw(TEXT)
    if draw(st.booleans()):
        choice["finish_reason"] = draw(FINISH)
    obj: dict[str, object] = {"object": "chunk"}
    choices = draw(st.sampled_from(["one", "empty", "absent", "broken"]))
    if choices == "one":
        obj["choices"] = [choice]
    elif choices == "empty":
        obj["choices"] = []
    elif choices == "broken":
        obj["choices"] = draw(st.sampled_from([{"0": choice}, "abc", [1], 5]))
    for key, strategy in (("usage", USAGE), ("timings", st.just({"predicted_n": 1})), ("latscope", LAB)):
        if draw(st.booleans()):
            obj[key] = draw(strategy)
    if draw(st.integers(0, 9)) == 0:
        obj["error"] = {"message": "m"}
    return draw(st.one_of(st.just(obj), st.just(obj), st.sampled_from([[obj], 3, "s", None])))


@settings(max_examples=400, deadline=None)
@given(chunk_objects(), st.sampled_from(["chat", "completions"]))
def test_fast_path_agrees_with_general_decoding(obj: object, mode: str) -> None:
    event = SSEEvent("message", orjson.dumps(obj).decode(), None, None, 100)
    fast, general = OpenAIStreamDecoder(mode), OpenAIStreamDecoder(mode)
    fast._batch = general._batch = [event]
    assert fast._decode_message(event) == general._decode_event(event, _UNPARSED)
    assert fast.warnings == general.warnings
