"""SSEParser against the rules of WHATWG HTML §9.2.6 "Interpreting an event stream", one rule per test.

The first tests are the spec's own examples (§9.2.6 and the examples after §9.2.5's "event stream" grammar).
"""

from __future__ import annotations

import pytest

from latscope.sse import SSEEvent, SSEParser


def parse(*feeds: bytes) -> tuple[list[SSEEvent], SSEParser]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for feed in feeds:
        events += parser.feed(feed)
    events += parser.close()
    return events, parser


def datas(*feeds: bytes) -> list[str]:
    return [event.data for event in parse(*feeds)[0]]


# -- the spec's examples -----------------------------------------------------------------------------------------


def test_spec_stock_example_joins_data_lines_with_lf() -> None:
    assert datas(b"data: YHOO\ndata: +2\ndata: 10\n\n") == ["YHOO\n+2\n10"]


def test_spec_test_stream_example_sets_and_resets_the_last_event_id() -> None:
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    events, parser = parse(stream)
    assert [(e.data, e.id) for e in events] == [("first event", "1"), ("second event", ""), (" third event", "")]
    assert parser.comments == 1


def test_spec_test_stream_example_needs_a_blank_line_to_fire_the_last_event() -> None:
    stream = b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n"
    events, parser = parse(stream)
    assert [e.data for e in events] == ["first event", "second event"]
    assert parser.ended_mid_event


def test_spec_empty_data_example_fires_an_empty_and_a_newline_event() -> None:
    assert datas(b"data\n\ndata\ndata\n\ndata:") == ["", "\n"]


def test_spec_space_after_the_colon_is_optional() -> None:
    assert datas(b"data:test\n\ndata: test\n\n") == ["test", "test"]


# -- line endings --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_line_ending_kind_ends_lines(eol: bytes) -> None:
    stream = b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert datas(stream) == ["a\nb", "c"]


def test_mixed_line_endings_in_one_stream() -> None:
    assert datas(b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r") == ["a\nb\nc", "d"]


def test_cr_then_lf_in_the_next_feed_is_one_line_ending() -> None:
    # Were the LF a second line ending, it would be a blank line and dispatch "a" alone.
    assert datas(b"data: a\r", b"\ndata: b\r\n\r\n") == ["a\nb"]


def test_cr_then_lf_split_inside_the_blank_line() -> None:
    assert datas(b"data: a\r\n\r", b"\ndata: b\r\n\r\n") == ["a", "b"]


def test_cr_at_the_end_of_a_feed_dispatches_without_waiting_for_the_next() -> None:
    parser = SSEParser()
    assert [e.data for e in parser.feed(b"data: a\r\r")] == ["a"]


# -- BOM -------------------------------------------------------------------------------------------------------------


def test_a_leading_bom_is_stripped() -> None:
    assert datas(b"\xef\xbb\xbfdata: a\n\n") == ["a"]


def test_a_bom_split_over_feeds_is_stripped() -> None:
    assert datas(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == ["a"]


def test_only_one_bom_is_stripped() -> None:
    # The second BOM becomes part of the first field name, "\ufeffdata", which is not a known field.
    assert datas(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n") == ["b"]


def test_a_bom_after_the_start_is_data() -> None:
    assert datas(b"data: \xef\xbb\xbfa\n\n") == ["\ufeffa"]


def test_offsets_count_the_bom() -> None:
    events, _ = parse(b"\xef\xbb\xbfdata: a\n\n")
    assert events[0].end_offset == 3 + 9


# -- fields ----------------------------------------------------------------------------------------------------------


def test_comments_are_ignored_and_counted() -> None:
    events, parser = parse(b": ping\n\n:\ndata: a\n: inside\n\n")
    assert [e.data for e in events] == ["a"]
    assert parser.comments == 3


def test_a_line_without_colon_is_a_field_with_an_empty_value() -> None:
    events, _ = parse(b"event\ndata\n\n")
    assert events == [SSEEvent("message", "", None, None, 12)]


def test_only_one_leading_space_is_removed() -> None:
    assert datas(b"data:  two\n\n") == [" two"]


def test_the_value_runs_from_the_first_colon() -> None:
    assert datas(b'data: {"a": "b:c"}\n\n') == ['{"a": "b:c"}']


def test_field_names_are_case_sensitive() -> None:
    assert datas(b"Data: a\n\ndata: b\n\n") == ["b"]


def test_unknown_fields_are_ignored() -> None:
    assert datas(b"foo: bar\ndata: a\nbaz\n\n") == ["a"]


def test_event_field_sets_the_type() -> None:
    events, _ = parse(b"event: update\ndata: a\n\n")
    assert events[0].event == "update"


def test_type_defaults_to_message_and_resets_after_dispatch() -> None:
    events, _ = parse(b"event: update\ndata: a\n\ndata: b\n\n")
    assert [e.event for e in events] == ["update", "message"]


def test_a_blank_line_with_no_data_resets_the_type_and_dispatches_nothing() -> None:
    events, _ = parse(b"event: update\n\ndata: b\n\n")
    assert [(e.event, e.data) for e in events] == [("message", "b")]


def test_id_persists_across_events() -> None:
    events, _ = parse(b"id: 7\ndata: a\n\ndata: b\n\n")
    assert [e.id for e in events] == ["7", "7"]


def test_id_without_data_still_sets_the_last_event_id() -> None:
    events, parser = parse(b"id: 7\n\ndata: b\n\n")
    assert [e.id for e in events] == ["7"]
    assert parser.last_event_id == "7"


def test_id_containing_nul_is_ignored() -> None:
    events, _ = parse(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert [e.id for e in events] == ["1", "1"]


def test_empty_id_resets_the_last_event_id_to_empty() -> None:
    events, _ = parse(b"id: 1\ndata: a\n\nid\ndata: b\n\n")
    assert [e.id for e in events] == ["1", ""]


def test_id_is_none_until_one_is_seen() -> None:
    events, _ = parse(b"data: a\n\n")
    assert events[0].id is None


def test_retry_with_ascii_digits_sets_the_reconnection_time() -> None:
    events, parser = parse(b"retry: 3000\ndata: a\n\n")
    assert events[0].retry == 3000
    assert parser.retry_ms == 3000


@pytest.mark.parametrize("value", [b"10a", b" 10", b"-5", b"1.5", b"", "١٠".encode()], ids=repr)
def test_retry_that_is_not_all_ascii_digits_is_ignored(value: bytes) -> None:
    events, parser = parse(b"retry: 5\n\nretry: " + value + b"\ndata: a\n\n")
    assert events[0].retry == 5
    assert parser.retry_ms == 5


# -- dispatch and end of stream --------------------------------------------------------------------------------------


def test_end_offset_is_just_past_the_dispatching_lf() -> None:
    events, _ = parse(b"data: a\n\ndata: bc\n\n")
    assert [e.end_offset for e in events] == [9, 19]


def test_end_offset_with_crlf_is_just_past_the_blank_lines_cr() -> None:
    events, _ = parse(b"data: a\r\n\r\ndata: b\r\n\r\n")
    assert [e.end_offset for e in events] == [10, 21]


def test_an_unfinished_event_at_end_of_stream_is_discarded_and_counted() -> None:
    events, parser = parse(b"data: a\n\ndata: b\n")
    assert [e.data for e in events] == ["a"]
    assert parser.ended_mid_event
    assert parser.discarded_bytes == len(b"data: b\n")


def test_an_incomplete_last_line_is_discarded_and_counted() -> None:
    events, parser = parse(b'data: a\n\ndata: {"tru')
    assert [e.data for e in events] == ["a"]
    assert parser.discarded_bytes == len(b'data: {"tru')


def test_a_stream_ending_between_events_discards_nothing() -> None:
    _, parser = parse(b"data: a\n\n")
    assert not parser.ended_mid_event
    assert parser.discarded_bytes == 0


def test_a_trailing_comment_is_not_an_unfinished_event() -> None:
    _, parser = parse(b"data: a\n\n: bye")
    assert parser.discarded_bytes == 0


def test_close_returns_no_event() -> None:
    parser = SSEParser()
    parser.feed(b"data: a\n")
    assert parser.close() == []


def test_feed_after_close_is_an_error() -> None:
    parser = SSEParser()
    parser.close()
    with pytest.raises(RuntimeError):
        parser.feed(b"data: a\n\n")


def test_an_empty_feed_returns_nothing() -> None:
    assert SSEParser().feed(b"") == []


def test_events_counts_dispatched_events() -> None:
    _, parser = parse(b"data: a\n\n: c\n\ndata: b\n\n")
    assert parser.events == 2


def test_bytes_fed_counts_every_byte() -> None:
    _, parser = parse(b"\xef\xbb\xbf", b"data: a\n\n", b"data")
    assert parser.bytes_fed == 3 + 9 + 4


# -- UTF-8 -----------------------------------------------------------------------------------------------------------


def test_invalid_utf8_is_replaced_and_its_offset_recorded() -> None:
    events, parser = parse(b"data: a\xffb\n\n")
    assert events[0].data == "a\ufffdb"
    assert parser.invalid_utf8_offsets == [7]


def test_a_truncated_sequence_at_the_end_of_a_value_is_one_replacement() -> None:
    events, parser = parse(b"data: \xe2\x82\ndata: x\n\n")
    assert events[0].data == "\ufffd\nx"
    assert parser.invalid_utf8_offsets == [6]


def test_every_invalid_sequence_is_recorded_in_stream_order() -> None:
    _, parser = parse(b"data: ok\n\ndata: \xc3(\xa0\n\nevent: \xfe\ndata: z\n\n")
    assert parser.invalid_utf8_offsets == [16, 18, 28]


def test_invalid_utf8_in_a_run_of_simple_events_is_found() -> None:
    events, parser = parse(b"data: a\n\ndata: \xff\n\ndata: c\n\n")
    assert [e.data for e in events] == ["a", "\ufffd", "c"]
    assert parser.invalid_utf8_offsets == [15]


def test_a_character_split_across_feeds_decodes_whole() -> None:
    assert datas(b"data: caf\xc3", b"\xa9\n\n") == ["café"]


def test_a_long_event_fed_byte_by_byte() -> None:
    stream = b'data: {"text": "' + "ü".encode() * 500 + b'"}\n\n'
    events, parser = parse(*(stream[i : i + 1] for i in range(len(stream))))
    assert events[0].data == '{"text": "' + "ü" * 500 + '"}'
    assert parser.invalid_utf8_offsets == []


# -- many events in one read (the fast paths) ---------------------------------------------------------------------


def test_a_comment_inside_a_run_of_events_is_counted_and_the_run_continues() -> None:
    stream = b"data: 1\n\ndata: 2\n\n: keep-alive\n\ndata: 3\n\ndata: 4\n\n"
    events, parser = parse(stream)
    assert [e.data for e in events] == ["1", "2", "3", "4"]
    assert parser.comments == 1


def test_a_multi_line_event_inside_a_run_of_events() -> None:
    assert datas(b"data: 1\n\nevent: x\ndata: 2\ndata: 3\n\ndata: 4\n\n") == ["1", "2\n3", "4"]


def test_a_run_of_crlf_events() -> None:
    events, _ = parse(b"data: 1\r\n\r\ndata: 22\r\n\r\ndata: 3\r\n\r\n")
    assert [(e.data, e.end_offset) for e in events] == [("1", 10), ("22", 22), ("3", 33)]


def test_a_read_ending_between_the_two_lfs_of_an_event() -> None:
    assert datas(b"data: 1\n\ndata: 2\n", b"\ndata: 3\n\n") == ["1", "2", "3"]


def test_extra_blank_lines_between_events_dispatch_nothing() -> None:
    assert datas(b"data: 1\n\n\n\n\ndata: 2\n\n") == ["1", "2"]


def test_an_event_whose_id_line_came_in_an_earlier_read_is_complete() -> None:
    events, parser = parse(b"id: 5\n", b"data: x\n\n")
    assert [(e.data, e.id) for e in events] == [("x", "5")]
    assert parser.discarded_bytes == 0
