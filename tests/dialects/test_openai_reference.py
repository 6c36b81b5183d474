"""The stream decoder's shortcuts (data strings from ``SSEParser.feed_values``, learnt chunk templates, decoding runs
of events at once) against a plain reading: every event parsed with ``orjson`` and decoded by the general path.

Generated streams mix the shapes real servers write (OpenAI, vLLM, llama.cpp key orders, compact and spaced JSON,
escaped and non-ASCII text, texts that look like JSON syntax or like the template probe), with role, finish, usage,
lab stamps, typed ``event: error`` events, comments, ``[DONE]``, broken JSON, and a changing ``created`` field (which
retires a template), split into random reads. The two must give identical chunks, errors and warnings.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from latscope.dialects.base import Chunk, StreamDecodeError
from latscope.dialects.openai import _PROBE, _UNPARSED, EventDecodeError, OpenAIStreamDecoder


class PlainDecoder(OpenAIStreamDecoder):
    """The reference: ``SSEParser.feed`` events, each parsed with orjson and decoded by the general path."""

    def feed(self, data: bytes) -> list[Chunk]:
        sse = self._sse
        events = sse.feed(data)
        if len(sse.invalid_utf8_offsets) != self._utf8_seen:
            self._report_invalid_utf8()
        self._batch = events
        out: list[Chunk] = []
        try:
            for event in events:
                out.append(self._decode_event(event, _UNPARSED))
        except EventDecodeError as exc:
            exc.chunks = out
            raise
        return out


PLAIN_TEXT = st.sampled_from([" tok", "a", " the", "é", "😀", "x y", "42", "{", "}", ":", ","])
#: texts that need escaping, are not printable, are the probe, or equal a key or another value of the chunk
ESCAPED_OR_ODD = ["", 'a"b', "back\\slash", "tab\there", "nl\nx", "\u2028", "\x7f", "\u00ad", _PROBE, " "]
LOOK_ALIKES = ["chatcmpl-1", "content", "delta", "text", "index", "null", "m", "x", "fp", "zz", "choices"]
TRICKY_TEXT = st.sampled_from([*ESCAPED_OR_ODD, *LOOK_ALIKES])
TEXTS = st.one_of(PLAIN_TEXT, PLAIN_TEXT, PLAIN_TEXT, PLAIN_TEXT, st.text(max_size=6), TRICKY_TEXT)
SHAPES = ("openai", "vllm", "llamacpp", "minimal", "nested")
#: what each event is; mostly text chunks, so that reads hold runs of them for the template paths
EVENTS = ["text"] * 30 + ["reasoning", "role", "finish", "usage", "done", "typed", "lab", "created", "created"]
EVENTS += ["comment", "finish_text", "duplicate_key", "bad"]


def base_chunk(shape: str, mode: str, created: int) -> dict[str, Any]:
    """A chunk of one server's shape, with an empty delta / text."""
    key, value = ("delta", {}) if mode == "chat" else ("text", "")
    if shape == "openai":
        choice = {"index": 0, key: value, "logprobs": None, "finish_reason": None}
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": created, "model": "m",
                "system_fingerprint": "fp", "choices": [choice]}  # fmt: skip
    if shape == "vllm":
        choice = {"index": 0, key: value, "logprobs": None, "finish_reason": None}
        return {"id": "x", "object": "chat.completion.chunk", "created": created, "model": "m", "choices": [choice],
                "usage": None}  # fmt: skip
    if shape == "llamacpp":
        choice = {"finish_reason": None, "index": 0, key: value}
        return {"choices": [choice], "created": created, "id": "chatcmpl-1", "model": "m",
                "object": "chat.completion.chunk"}  # fmt: skip
    if shape == "nested":  # a "content" key elsewhere, to tempt a template into the wrong place
        return {"choices": [{"index": 0, key: value, "extra": {"content": "zz"}}], "content": "zz"}
    return {"choices": [{key: value}]}


def dump(obj: object, style: str) -> bytes:
    if style == "orjson":
        return orjson.dumps(obj)
    if style == "ascii":
        return json.dumps(obj, separators=(",", ":")).encode()
    if style == "spaced":
        return json.dumps(obj, ensure_ascii=False).encode()
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


@st.composite
def streams(draw: st.DrawFn) -> tuple[str, bytes, list[int]]:
    """``(mode, stream bytes, cut positions)``."""
    mode = draw(st.sampled_from(["chat", "completions"]))
    shape = draw(st.sampled_from(SHAPES))
    created = 1_700_000_000
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    style = draw(st.sampled_from(["orjson", "compact", "ascii", "spaced"]))
    parts: list[bytes] = []
    ends: list[int] = []  # where events end: reads are cut at some of them, so reads hold runs of whole events
    for _ in range(draw(st.integers(1, 40))):
        what = draw(st.sampled_from(EVENTS))
        if what == "created":  # llama.cpp's `created` moves on every second: the text chunks change shape
            created += 1
            continue
        ends.append(sum(map(len, parts)))
        if what == "comment":
            parts.append(b": ping" + eol + eol)
            continue
        if what == "typed":
            payload = dump({"error": {"message": "m"}}, style)
            parts.append(b"event: error" + eol + b"data: " + payload + eol + eol)
            continue
        obj = base_chunk(shape, mode, created)
        choice = obj["choices"][0]
        text_key = "delta" if mode == "chat" else "text"
        if what in ("text", "finish_text", "lab"):
            text = draw(TEXTS)
            choice[text_key] = {"content": text} if mode == "chat" else text
            if what == "finish_text":
                choice["finish_reason"] = "length"
            if what == "lab":
                obj["latscope"] = {"sent_ns": draw(st.integers(0, 10))}
        elif what == "reasoning":
            field = draw(st.sampled_from(["reasoning_content", "reasoning"]))
            choice[text_key] = {field: draw(TEXTS)} if mode == "chat" else draw(TEXTS)
        elif what == "role" and mode == "chat":
            choice["delta"] = {"role": "assistant"}
        elif what == "finish":
            choice["finish_reason"] = "stop"
        elif what == "usage":
            obj["usage"] = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        if what == "done":
            line = b"[DONE]"
        elif what == "bad":
            line = draw(st.sampled_from([b"{bad json", b"", b"{}", b"[1]", b'{"choices": 5}']))
        elif what == "duplicate_key" and mode == "chat":  # the last value wins in JSON parsers, not the first
            line = b'{"choices":[{"delta":{"content":"' + draw(st.sampled_from([b"a", b"b"])) + b'","content":"c"}}]}'
        else:
            line = dump(obj, style)
        parts.append(b"data: " + line + eol + eol)
    stream = b"".join(parts)
    if draw(st.integers(0, 3)) == 0:
        stream = stream[: draw(st.integers(0, len(stream)))]
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=3))
    cuts += [end for end in ends if end <= len(stream) and draw(st.integers(0, 3)) == 0]
    return mode, stream, sorted(cuts)


def run(decoder: OpenAIStreamDecoder, stream: bytes, cuts: list[int]) -> tuple[list[Chunk], str | None, list[str]]:
    """Everything the decoder produced for ``stream`` fed in pieces: chunks (those handed over with a decode error
    included), the error message, the warnings."""
    chunks: list[Chunk] = []
    start = 0
    try:
        for cut in [*cuts, len(stream)]:
            chunks += decoder.feed(stream[start:cut])
            start = cut
        chunks += decoder.close()
    except StreamDecodeError as exc:
        chunks += getattr(exc, "chunks", [])
        return chunks, str(exc), list(decoder.warnings)
    return chunks, None, list(decoder.warnings)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_the_decoder_gives_what_plain_per_event_parsing_gives(case: tuple[str, bytes, list[int]]) -> None:
    mode, stream, cuts = case
    assert run(OpenAIStreamDecoder(mode), stream, cuts) == run(PlainDecoder(mode), stream, cuts)


def test_the_generated_streams_exercise_the_template_path() -> None:
    # Not a property: a guard that the comparison above covers the shortcut it is about. A stream of one server's
    # text chunks, several per read, is decoded mostly without parsing JSON.
    obj = base_chunk("openai", "chat", 1_700_000_000)
    events = []
    for i in range(40):
        obj["choices"][0]["delta"] = {"content": f" w{i}"}
        events.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    stream = b"".join(events) + b"data: [DONE]\n\n"
    decoder = OpenAIStreamDecoder("chat")
    cuts = list(range(0, len(stream), 700))
    assert run(decoder, stream, cuts) == run(PlainDecoder("chat"), stream, cuts)
    assert decoder._parsed < 10  # the rest were decoded by the learnt template


def test_a_look_alike_value_elsewhere_in_the_chunk_is_not_taken_for_the_text() -> None:
    # The text is written escaped ("\u00e9") and the same text stands verbatim in another field: the only "é" in the
    # data is not the text, which the template's probe finds out (it changes that field, and the text does not).
    def chunk(note: str) -> bytes:
        return b'data: {"note":"' + note.encode() + b'","choices":[{"delta":{"content":"\\u00e9"}}]}\n\n'

    stream = chunk("é") + chunk("b") + chunk("c") + chunk("zz") + chunk("q") + b"data: [DONE]\n\n"
    cuts = [len(chunk("é")), 2 * len(chunk("é"))]  # one event alone (template learning), then runs
    decoder = OpenAIStreamDecoder("chat")
    decoded = run(decoder, stream, cuts)
    assert [c.text for c in decoded[0][:-1]] == ["é"] * 5
    assert decoded == run(PlainDecoder("chat"), stream, cuts)
