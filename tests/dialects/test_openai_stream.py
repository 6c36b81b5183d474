"""OpenAIStreamDecoder on hand-made byte fixtures: one behaviour per test."""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects.base import ApiError, Chunk, StreamDecodeError
from latscope.dialects.openai import EventDecodeError, OpenAIStreamDecoder
from latscope.dialects.ssewarnings import MAX_UTF8_WARNINGS
from latscope.timeline.model import EventKind, Usage


def sse(*objects: object) -> bytes:
    """``data: <json>`` events; a str is sent as is (for ``[DONE]`` and broken payloads)."""
    out = b""
    for obj in objects:
        payload = obj.encode() if isinstance(obj, str) else orjson.dumps(obj)
        out += b"data: " + payload + b"\n\n"
    return out


def chat_chunk(delta: dict[str, object], finish: str | None = None, **top: object) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **top,
    }


def decode(data: bytes, mode: str = "chat") -> tuple[list[Chunk], OpenAIStreamDecoder]:
    decoder = OpenAIStreamDecoder(mode)
    chunks = decoder.feed(data)
    chunks += decoder.close()
    return chunks, decoder


def one(data: bytes, mode: str = "chat") -> Chunk:
    chunks, _ = decode(data, mode)
    assert len(chunks) == 1
    return chunks[0]


# -- kinds -----------------------------------------------------------------------------------------------------------


def test_role_only_delta_is_role() -> None:
    assert one(sse(chat_chunk({"role": "assistant", "content": ""}))).kind is EventKind.ROLE


def test_content_delta_is_content_with_one_token() -> None:
    chunk = one(sse(chat_chunk({"content": " hi"})))
    assert (chunk.kind, chunk.text, chunk.tokens) == (EventKind.CONTENT, " hi", 1)


def test_reasoning_content_delta_is_reasoning() -> None:
    chunk = one(sse(chat_chunk({"reasoning_content": "Let me think"})))
    assert (chunk.kind, chunk.text, chunk.tokens) == (EventKind.REASONING, "Let me think", 1)


def test_reasoning_delta_is_reasoning() -> None:
    chunk = one(sse(chat_chunk({"content": "", "reasoning": "hmm"})))
    assert (chunk.kind, chunk.text) == (EventKind.REASONING, "hmm")


def test_content_wins_over_reasoning_in_one_delta() -> None:
    chunk = one(sse(chat_chunk({"content": "a", "reasoning_content": "b"})))
    assert (chunk.kind, chunk.text) == (EventKind.CONTENT, "a")


def test_finish_reason_without_text_is_finish() -> None:
    chunk = one(sse(chat_chunk({}, "stop")))
    assert (chunk.kind, chunk.finish_reason, chunk.tokens) == (EventKind.FINISH, "stop", 0)


def test_content_chunk_keeps_the_finish_reason_it_carries() -> None:
    chunk = one(sse(chat_chunk({"content": "."}, "stop")))
    assert (chunk.kind, chunk.finish_reason) == (EventKind.CONTENT, "stop")


def test_completions_text_is_content() -> None:
    data = sse({"object": "text_completion", "choices": [{"index": 0, "text": " x", "finish_reason": None}]})
    chunk = one(data, "completions")
    assert (chunk.kind, chunk.text, chunk.tokens) == (EventKind.CONTENT, " x", 1)


def test_an_explicitly_empty_content_is_a_token_without_text() -> None:
    # llama-cpp-python sends one chunk per generated token; a token whose text is not printable yet (part of a UTF-8
    # sequence, a control token) comes as `"content": ""`, and the server's usage counts it.
    chunk = one(sse(chat_chunk({"content": ""})))
    assert (chunk.kind, chunk.text, chunk.tokens) == (EventKind.CONTENT, "", 1)


def test_an_explicitly_empty_completions_text_is_a_token_without_text() -> None:
    data = sse({"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": None}]})
    chunk = one(data, "completions")
    assert (chunk.kind, chunk.text, chunk.tokens) == (EventKind.CONTENT, "", 1)


@pytest.mark.parametrize(
    ("delta", "finish", "kind"),
    [
        ({"role": "assistant", "content": ""}, None, EventKind.ROLE),  # OpenAI's and vLLM's first chunk
        ({"content": ""}, "stop", EventKind.FINISH),  # vLLM's finish chunk
        ({"content": None}, None, EventKind.OTHER),
    ],
    ids=["role", "finish", "null"],
)
def test_an_empty_content_with_more_to_it_is_not_a_token(
    delta: dict[str, object], finish: str | None, kind: EventKind
) -> None:
    chunk = one(sse(chat_chunk(delta, finish)))
    assert (chunk.kind, chunk.tokens) == (kind, 0)


def test_empty_delta_is_other_without_warning() -> None:
    chunks, decoder = decode(sse(chat_chunk({}), "[DONE]"))
    assert chunks[0].kind is EventKind.OTHER
    assert decoder.warnings == []


def test_empty_choices_alone_is_other_without_warning() -> None:
    # Azure OpenAI's first chunk: prompt filter results and no choices.
    data = sse({"choices": [], "prompt_filter_results": [{"prompt_index": 0}]}, "[DONE]")
    chunks, decoder = decode(data)
    assert chunks[0].kind is EventKind.OTHER
    assert decoder.warnings == []


def test_done_sentinel_is_done() -> None:
    chunks, decoder = decode(sse("[DONE]"))
    assert chunks == [Chunk(EventKind.DONE)]
    assert decoder.saw_done
    assert decoder.warnings == []


# -- usage and timings -------------------------------------------------------------------------------------------


def test_usage_chunk_with_empty_choices_is_usage() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    chunk = one(sse({"choices": [], "usage": usage}))
    assert chunk.kind is EventKind.USAGE
    assert chunk.usage == Usage(10, 5, 15, cached_tokens=8, reasoning_tokens=3)


def test_usage_null_on_content_chunks_is_no_usage() -> None:
    # OpenAI sends "usage": null on every chunk but the last when include_usage is set.
    chunk = one(sse(chat_chunk({"content": "a"}, usage=None)))
    assert chunk.usage is None


def test_usage_fields_that_are_not_integers_are_left_empty() -> None:
    chunk = one(sse({"choices": [], "usage": {"prompt_tokens": "10", "completion_tokens": True, "total_tokens": 3}}))
    assert chunk.usage == Usage(total_tokens=3)


def test_timings_alone_is_usage_with_raw_timings() -> None:
    chunk = one(sse({"choices": [], "timings": {"prompt_ms": 1.5, "predicted_n": 4}}))
    assert chunk.kind is EventKind.USAGE
    assert chunk.timings == {"prompt_ms": 1.5, "predicted_n": 4}


def test_timings_on_a_content_chunk_are_kept() -> None:
    chunk = one(sse(chat_chunk({"content": "a"}, timings={"predicted_n": 1})))
    assert (chunk.kind, chunk.timings) == (EventKind.CONTENT, {"predicted_n": 1})


# -- the lab's truth stamp -----------------------------------------------------------------------------------------


def test_truth_stamp_gives_server_sent_ns_and_keeps_the_lab_object() -> None:
    lab = {"sent_ns": 123_456_789, "request": 7, "batch": 3}
    chunk = one(sse(chat_chunk({"content": "a"}, latscope=lab)))
    assert chunk.server_sent_ns == 123_456_789
    assert chunk.extra == {"latscope": lab}


def test_truth_stamp_on_the_usage_chunk() -> None:
    chunk = one(sse({"choices": [], "usage": {"completion_tokens": 1}, "latscope": {"sent_ns": 5}}))
    assert (chunk.kind, chunk.server_sent_ns) == (EventKind.USAGE, 5)


def test_truth_stamp_that_is_not_an_integer_is_ignored() -> None:
    chunk = one(sse(chat_chunk({"content": "a"}, latscope={"sent_ns": "5"})))
    assert chunk.server_sent_ns is None


def test_no_truth_stamp_means_no_server_sent_ns() -> None:
    chunk = one(sse(chat_chunk({"content": "a"})))
    assert (chunk.server_sent_ns, chunk.extra) == (None, None)


# -- errors in the stream ------------------------------------------------------------------------------------------


def test_error_object_as_data_is_error() -> None:
    error = {"message": "overloaded", "type": "server_error", "code": 503, "param": None}
    chunk = one(sse({"error": error}))
    assert chunk.kind is EventKind.ERROR
    assert chunk.error == ApiError(message="overloaded", type="server_error", code=503)


def test_sse_error_event_with_json_is_error() -> None:
    chunk = one(b'event: error\ndata: {"error": {"message": "boom", "type": "internal"}}\n\n')
    assert chunk.kind is EventKind.ERROR
    assert chunk.error == ApiError(message="boom", type="internal")


def test_sse_error_event_with_plain_text_is_error() -> None:
    chunk = one(b"event: error\ndata: upstream timed out\n\n")
    assert chunk.error == ApiError(message="upstream timed out")


def test_tgi_style_error_is_error() -> None:
    chunk = one(sse({"error": "Input validation error", "error_type": "validation"}))
    assert chunk.error == ApiError(message="Input validation error", type="validation")


def test_old_vllm_error_object_is_error() -> None:
    chunk = one(sse({"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}))
    assert chunk.error == ApiError(message="too long", type="BadRequestError", code=400)


# -- malformed input ------------------------------------------------------------------------------------------------


def test_invalid_json_raises_naming_the_event_and_its_offset() -> None:
    data = sse(chat_chunk({"content": "a"}), chat_chunk({"content": "b"})) + b'data: {"choices": [\n\n'
    decoder = OpenAIStreamDecoder()
    with pytest.raises(StreamDecodeError) as caught:
        decoder.feed(data)
    message = str(caught.value)
    assert "SSE event 3" in message
    assert f"stream byte {len(data)}" in message
    assert '{"choices": [' in message


def test_an_invalid_event_carries_the_chunks_decoded_before_it_in_the_same_feed() -> None:
    data = sse(chat_chunk({"content": "a"}), chat_chunk({"content": "b"})) + b'data: {"choices": [\n\n'
    with pytest.raises(EventDecodeError) as caught:
        OpenAIStreamDecoder().feed(data + sse(chat_chunk({"content": "after"})))
    assert [(c.kind, c.text) for c in caught.value.chunks] == [(EventKind.CONTENT, "a"), (EventKind.CONTENT, "b")]


def test_an_invalid_event_after_a_learnt_template_carries_the_chunks_before_it() -> None:
    decoder = OpenAIStreamDecoder()
    for text in ("x", "y", "z"):
        decoder.feed(sse(chat_chunk({"content": text})))  # one per read: the decoder learns the stream's shape
    data = sse(chat_chunk({"content": "a"}), chat_chunk({"content": "b"})) + b"data: {broken\n\n"
    with pytest.raises(EventDecodeError, match="SSE event 6") as caught:
        decoder.feed(data)
    assert [c.text for c in caught.value.chunks] == ["a", "b"]


def test_an_invalid_event_among_typed_events_carries_the_chunks_before_it() -> None:
    typed = b'event: error\ndata: {"error": {"message": "m"}}\n\n'
    data = sse(chat_chunk({"content": "a"})) + typed + b"data: nope\n\n"
    with pytest.raises(EventDecodeError) as caught:
        OpenAIStreamDecoder().feed(data)
    assert [c.kind for c in caught.value.chunks] == [EventKind.CONTENT, EventKind.ERROR]


def test_invalid_json_in_a_later_feed_is_numbered_from_the_stream_start() -> None:
    decoder = OpenAIStreamDecoder()
    decoder.feed(sse(chat_chunk({"content": "a"})))
    with pytest.raises(StreamDecodeError, match="SSE event 2"):
        decoder.feed(b"data: nope\n\n")


def test_invalid_json_excerpt_is_short() -> None:
    decoder = OpenAIStreamDecoder()
    with pytest.raises(StreamDecodeError) as caught:
        decoder.feed(b"data: {" + b"x" * 5000 + b"\n\n")
    assert len(str(caught.value)) < 400


def test_invalid_utf8_is_replaced_and_warned_with_its_offset() -> None:
    data = b'data: {"choices": [{"delta": {"content": "a\xffb"}}]}\n\n'
    chunks, decoder = decode(data + sse("[DONE]"))
    assert chunks[0].text == "a\ufffdb"
    offset = data.index(b"\xff")
    assert decoder.warnings == [f"invalid UTF-8 at stream byte {offset} (replaced by U+FFFD)"]


def test_invalid_utf8_warnings_are_capped_with_a_total_at_close() -> None:
    data = b"".join(b'data: {"choices": [{"delta": {"content": "\xff"}}]}\n\n' for _ in range(MAX_UTF8_WARNINGS + 5))
    _, decoder = decode(data + sse("[DONE]"))
    assert len(decoder.warnings) == MAX_UTF8_WARNINGS + 1
    assert decoder.warnings[-1] == f"{MAX_UTF8_WARNINGS + 5} invalid UTF-8 sequences in all (replaced by U+FFFD)"


def test_unknown_shape_is_other_with_one_warning() -> None:
    chunks, decoder = decode(sse({"foo": 1}, {"bar": 2}, "[DONE]"))
    assert [chunk.kind for chunk in chunks] == [EventKind.OTHER, EventKind.OTHER, EventKind.DONE]
    assert len(decoder.warnings) == 1
    assert decoder.warnings[0].startswith("unrecognised event shape (first: SSE event 1")


def test_json_that_is_not_an_object_is_other_with_a_warning() -> None:
    chunks, decoder = decode(sse("42", "[DONE]"))
    assert chunks[0].kind is EventKind.OTHER
    assert len(decoder.warnings) == 1


def test_choice_of_the_wrong_shape_is_other_with_a_warning() -> None:
    chunks, decoder = decode(sse({"choices": ["text"]}, "[DONE]"))
    assert chunks[0].kind is EventKind.OTHER
    assert len(decoder.warnings) == 1


def test_empty_data_is_other_not_an_error() -> None:
    chunks, _ = decode(b"data:\n\n" + sse("[DONE]"))
    assert chunks[0].kind is EventKind.OTHER


# -- end of stream ---------------------------------------------------------------------------------------------------


def test_stream_without_done_warns_with_the_event_count_at_close() -> None:
    _, decoder = decode(sse(chat_chunk({"content": "a"}), chat_chunk({}, "stop")))
    assert decoder.warnings == ["stream ended without [DONE] after 2 events"]


def test_stream_cut_inside_an_event_warns_with_the_discarded_bytes() -> None:
    _, decoder = decode(sse("[DONE]") + b'data: {"choi')
    assert decoder.warnings == ["stream ended inside an unfinished event (12 bytes discarded)"]


def test_events_after_done_are_decoded_with_a_warning() -> None:
    chunks, decoder = decode(sse("[DONE]", chat_chunk({"content": "late"})))
    assert chunks[1].text == "late"
    assert decoder.warnings == ["events after [DONE] (first: SSE event 2)"]


def test_close_twice_adds_no_second_warning() -> None:
    decoder = OpenAIStreamDecoder()
    decoder.close()
    decoder.close()
    assert len(decoder.warnings) == 1


def test_comments_between_events_are_not_chunks() -> None:
    chunks, _ = decode(b": keep-alive\n\n" + sse(chat_chunk({"content": "a"}), "[DONE]"))
    assert [chunk.kind for chunk in chunks] == [EventKind.CONTENT, EventKind.DONE]


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown OpenAI mode"):
        OpenAIStreamDecoder("responses")


def test_chunk_has_the_fields_the_decoder_fills_in_order() -> None:
    # The decoder builds chunks with tuple.__new__ (no per-field defaults): a new Chunk field must be added there too.
    assert Chunk._fields == (
        "kind",
        "text",
        "tokens",
        "finish_reason",
        "usage",
        "timings",
        "error",
        "server_sent_ns",
        "extra",
        "choice",
    )
