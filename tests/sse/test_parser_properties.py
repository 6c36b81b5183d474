"""Generated streams: any split into feeds gives what one feed gives, and both match a plain reading of the spec."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from latscope.sse import SSEEvent, SSEParser
from tests.sse.reference import RefEvent, reference_parse


class Outcome(NamedTuple):
    events: list[SSEEvent]
    invalid_utf8_offsets: list[int]
    comments: int
    discarded_bytes: int
    last_event_id: str | None
    retry_ms: int | None


def run(stream: bytes, cuts: list[int]) -> Outcome:
    parser = SSEParser()
    events: list[SSEEvent] = []
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        events += parser.feed(stream[start:cut])
        start = cut
    events += parser.close()
    return Outcome(
        events,
        parser.invalid_utf8_offsets,
        parser.comments,
        parser.discarded_bytes,
        parser.last_event_id,
        parser.retry_ms,
    )


EOLS = st.sampled_from([b"\n", b"\r\n", b"\r"])
# Values: plain text, multi-byte characters, and bytes that are not UTF-8 (a lone continuation byte, a truncated
# 3-byte sequence, 0xFF), but never CR or LF, which would end the line.
VALUE_PIECES = st.sampled_from(
    [b"x", b"{", b'"', b":", b" ", b"42", "é".encode(), "€".encode(), "😀".encode(), b"\x80", b"\xe2\x82", b"\xff"]
)
VALUES = st.lists(VALUE_PIECES, max_size=6).map(b"".join)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["data", "data", "data", "event", "id", "retry", "comment", "bare", "unknown"]))
    value = draw(VALUES)
    if kind == "comment":
        return b":" + value
    if kind == "bare":
        return draw(st.sampled_from([b"data", b"event", b"id", b"retry"]))
    if kind == "retry":
        value = draw(st.sampled_from([b"100", b"7", b"1x", b""]))
    elif kind == "id" and draw(st.booleans()):
        value += b"\x00"
    name = b"foo" if kind == "unknown" else kind.encode()
    separator = draw(st.sampled_from([b": ", b":", b":  "]))
    return name + separator + value


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Blocks of field lines, each closed by a blank line, with random line endings; maybe a BOM, maybe a truncated
    last block."""
    out = [b"\xef\xbb\xbf"] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 5))):
        for line in draw(st.lists(lines(), max_size=4)):
            out.append(line + draw(EOLS))
        out.append(draw(EOLS))
    if draw(st.booleans()):
        out.append(draw(lines()))
    return b"".join(out)


# Raw byte soup: every token a parser must treat specially, in any order.
SOUP = st.lists(
    st.sampled_from(
        [
            b"data",
            b"event",
            b"id",
            b"retry",
            b":",
            b" ",
            b"\n",
            b"\r",
            b"\r\n",
            b"x",
            b"1",
            b"\x00",
            b"data: ",
            b"\xef\xbb\xbf",
            "é".encode(),
            b"\xe2\x82",
            b"\xff",
        ]
    ),
    max_size=40,
).map(b"".join)


def cuts_for(stream: bytes) -> st.SearchStrategy[list[int]]:
    """Random cut positions, plus ones inside every CRLF and every multi-byte UTF-8 sequence."""
    special = [i + 1 for i in range(len(stream) - 1) if stream[i : i + 2] == b"\r\n"]
    special += [i for i in range(1, len(stream)) if 0x80 <= stream[i] < 0xC0]  # before a continuation byte
    positions = st.integers(0, len(stream))
    if special:
        positions = st.one_of(positions, st.sampled_from(special))
    return st.lists(positions, max_size=8)


def as_ref(events: list[SSEEvent]) -> list[RefEvent]:
    return [RefEvent(e.event, e.data, e.id, e.retry) for e in events]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_split_of_a_stream_gives_the_same_outcome(data: st.DataObject) -> None:
    stream = data.draw(streams())
    cuts = data.draw(cuts_for(stream))
    assert run(stream, cuts) == run(stream, [])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_split_of_byte_soup_gives_the_same_outcome(data: st.DataObject) -> None:
    stream = data.draw(SOUP)
    cuts = data.draw(cuts_for(stream))
    assert run(stream, cuts) == run(stream, [])


@settings(max_examples=300, deadline=None)
@given(streams())
def test_generated_streams_match_the_reference_reading(stream: bytes) -> None:
    outcome = run(stream, [])
    reference = reference_parse(stream)
    assert as_ref(outcome.events) == reference.events
    assert (outcome.last_event_id, outcome.retry_ms) == (reference.last_event_id, reference.retry_ms)


@settings(max_examples=300, deadline=None)
@given(SOUP)
def test_byte_soup_matches_the_reference_reading(stream: bytes) -> None:
    outcome = run(stream, [])
    reference = reference_parse(stream)
    assert as_ref(outcome.events) == reference.events
    assert (outcome.last_event_id, outcome.retry_ms) == (reference.last_event_id, reference.retry_ms)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(VALUES, st.sampled_from([b"\n", b"\r\n"])), min_size=1, max_size=30), st.data())
def test_runs_of_simple_events_match_the_reference_under_any_split(
    events: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    # The shape every LLM server writes, many per read: exercises the bulk fast path and its fall-backs.
    stream = b"".join(b"data: " + value + eol + eol for value, eol in events)
    cuts = data.draw(cuts_for(stream))
    outcome = run(stream, cuts)
    assert as_ref(outcome.events) == reference_parse(stream).events
    assert outcome == run(stream, [])


# -- feed_values: the decoder's entry point gives what feed gives ----------------------------------------------------


def assert_feed_values_agrees_with_feed(stream: bytes, cuts: list[int]) -> None:
    """Feed the same pieces to two parsers, one through ``feed`` and one through ``feed_values`` (then
    ``last_values`` / ``last_types`` / ``last_events`` / ``last_end_offset``): the events, their data, types and
    offsets, and the parser state must agree."""
    plain, values_parser = SSEParser(), SSEParser()
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        piece = stream[start:cut]
        start = cut
        events = plain.feed(piece)
        values = values_parser.feed_values(piece)
        assert values_parser.last_values() == [e.data for e in events]
        assert values_parser.last_types() == [e.event for e in events]
        assert values_parser.last_events() == events
        if any(e.event != "message" for e in events):
            assert values is None
        else:
            assert values == [e.data for e in events]
        assert [values_parser.last_end_offset(i) for i in range(len(events))] == [e.end_offset for e in events]
        state = (plain.last_event_id, plain.retry_ms, plain.invalid_utf8_offsets, plain.comments, plain.events)
        assert state == (
            values_parser.last_event_id,
            values_parser.retry_ms,
            values_parser.invalid_utf8_offsets,
            values_parser.comments,
            values_parser.events,
        )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_feed_values_agrees_with_feed_on_any_split_of_a_stream(data: st.DataObject) -> None:
    stream = data.draw(streams())
    assert_feed_values_agrees_with_feed(stream, data.draw(cuts_for(stream)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.data())
def test_feed_values_agrees_with_feed_on_any_split_of_byte_soup(data: st.DataObject) -> None:
    stream = data.draw(SOUP)
    assert_feed_values_agrees_with_feed(stream, data.draw(cuts_for(stream)))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(VALUES, st.sampled_from([b"\n", b"\r\n"])), min_size=1, max_size=30), st.data())
def test_feed_values_agrees_with_feed_on_runs_of_simple_events(
    events: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    # the shape of LLM streams: the single-event and run fast paths, and their fall-backs
    stream = b"".join(b"data: " + value + eol + eol for value, eol in events)
    assert_feed_values_agrees_with_feed(stream, data.draw(cuts_for(stream)))


TYPES = st.sampled_from([b"content_block_delta", b"message", b"", b"ping", b"response.output_text.delta", b"\xc3\xa9t"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(TYPES, VALUES), min_size=1, max_size=30), st.data())
def test_runs_of_typed_events_match_the_reference_under_any_split(
    events: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    # `event: TYPE` + `data: VALUE` blocks, as Anthropic and OpenAI Responses write them (their own fast path)
    stream = b"".join(b"event: " + kind + b"\ndata: " + value + b"\n\n" for kind, value in events)
    stream += data.draw(st.sampled_from([b"", b"event: x\n", b"data: partial", b": comment\n\n"]))
    cuts = data.draw(cuts_for(stream))
    outcome = run(stream, cuts)
    assert outcome == run(stream, [])
    assert as_ref(outcome.events) == reference_parse(stream).events


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(TYPES, VALUES), min_size=1, max_size=30), st.data())
def test_feed_values_agrees_with_feed_on_runs_of_typed_events(
    events: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    # the typed run keeps its events as values and event lines: the events, types and offsets made from them
    stream = b"".join(b"event: " + kind + b"\ndata: " + value + b"\n\n" for kind, value in events)
    stream += data.draw(st.sampled_from([b"", b"event: x\n", b"data: partial", b": comment\n\n", b"data: m\n\n"]))
    assert_feed_values_agrees_with_feed(stream, data.draw(cuts_for(stream)))


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=30), st.data())
def test_runs_of_data_lines_without_the_space_match_the_reference_under_any_split(
    values: list[bytes], data: st.DataObject
) -> None:
    # `data:VALUE` events, as TGI writes them (their own fast path); a value may start with a space (then dropped)
    stream = b"".join(b"data:" + value + b"\n\n" for value in values)
    stream += data.draw(st.sampled_from([b"", b"data:x\n", b"data: partial", b"event: t\ndata:y\n\n"]))
    cuts = data.draw(cuts_for(stream))
    outcome = run(stream, cuts)
    assert outcome == run(stream, [])
    assert as_ref(outcome.events) == reference_parse(stream).events
