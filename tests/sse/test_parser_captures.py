"""The real servers' streams (tests/fixtures/real/) through the parser."""

from __future__ import annotations

import pytest

from latscope.sse import SSEEvent, SSEParser
from tests.support.httpfile import capture_names, load_capture

STREAMS = [name for name in capture_names() if ".stream." in name]


def feed_all(feeds: list[bytes]) -> tuple[list[SSEEvent], SSEParser]:
    parser = SSEParser()
    events = [event for feed in feeds for event in parser.feed(feed)]
    events += parser.close()
    return events, parser


def data_lines(body: bytes) -> list[str]:
    """What a naive reader sees: the text after ``data: `` on each line (all captures use one data line per event)."""
    return [line[6:].decode("utf-8", "replace") for line in body.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize("name", STREAMS)
def test_capture_gives_one_event_per_data_line(name: str) -> None:
    capture = load_capture(name)
    events, parser = feed_all(capture.chunks)
    assert [event.data for event in events] == data_lines(capture.body)
    assert not parser.ended_mid_event


@pytest.mark.parametrize("name", STREAMS)
def test_capture_fed_as_http_chunks_equals_capture_fed_whole(name: str) -> None:
    capture = load_capture(name)
    assert feed_all(capture.chunks)[0] == feed_all([capture.body])[0]


@pytest.mark.parametrize("name", STREAMS)
def test_capture_fed_byte_by_byte_equals_capture_fed_whole(name: str) -> None:
    body = load_capture(name).body
    assert feed_all([body[i : i + 1] for i in range(len(body))])[0] == feed_all([body])[0]


@pytest.mark.parametrize("name", STREAMS)
def test_capture_event_offsets_point_just_past_each_blank_line(name: str) -> None:
    body = load_capture(name).body
    events, _ = feed_all([body])
    assert all(body[event.end_offset - 2 : event.end_offset] == b"\n\n" for event in events)
    assert events[-1].end_offset == len(body)


def test_llama_server_chat_stream_has_twelve_events_ending_with_done() -> None:
    events, _ = feed_all(load_capture("llama-server.chat.stream.http").chunks)
    assert len(events) == 12
    assert events[-1].data == "[DONE]"


def test_transformers_stream_has_no_done_event() -> None:
    events, _ = feed_all(load_capture("transformers-serve.chat.stream.http").chunks)
    assert len(events) == 5
    assert all(event.data != "[DONE]" for event in events)


def test_transformers_replacement_characters_are_valid_utf8_as_sent() -> None:
    # The server itself replaced a broken byte sequence with U+FFFD; the bytes on the wire are valid UTF-8.
    events, parser = feed_all(load_capture("transformers-serve.chat.stream.http").chunks)
    assert "\ufffd" in events[2].data
    assert parser.invalid_utf8_offsets == []
