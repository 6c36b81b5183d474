"""Server-Timing (W3C) parsing: durations in ms, quoted strings, repeated fields, trailers, malformed members."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latscope.signals.servertiming import (
    _DURATIONS_VALUE,
    _PLAIN_VALUE,
    TCHARS,
    ServerTimingMetric,
    _parse_scanned,
    format_server_timing,
    parse_server_timing,
    parse_server_timing_value,
)


def test_spec_example_gives_durations_in_ms_and_descriptions() -> None:
    metrics = parse_server_timing([("Server-Timing", 'db;dur=53, cache;desc="Cache Read";dur=23.2')])
    assert [(m.name, m.dur_ms, m.desc) for m in metrics] == [("db", 53.0, None), ("cache", 23.2, "Cache Read")]


def test_quoted_string_keeps_escaped_quotes_backslashes_commas_and_semicolons() -> None:
    value = r'x;desc="a \"quoted\" \\ back, with ; and ,";dur=1'
    (metric,) = parse_server_timing_value(value)
    assert metric.desc == 'a "quoted" \\ back, with ; and ,'
    assert metric.dur_ms == 1.0


def test_parameter_without_value_is_kept_with_value_none() -> None:
    miss, cdn = parse_server_timing_value("miss, cdn;hit;dur=2")
    assert miss == ServerTimingMetric("miss")
    assert cdn.params == (("hit", None), ("dur", "2"))
    assert cdn.dur_ms == 2.0


def test_repeated_field_lines_and_repeated_names_are_all_kept_in_order() -> None:
    headers = [("Server-Timing", "queue;dur=1"), ("server-timing", "queue;dur=2, prefill;dur=3")]
    assert [(m.name, m.dur_ms) for m in parse_server_timing(headers)] == [
        ("queue", 1.0),
        ("queue", 2.0),
        ("prefill", 3.0),
    ]


def test_trailers_come_after_headers() -> None:
    metrics = parse_server_timing({"server-timing": "queue;dur=4"}, [("Server-Timing", "decode;dur=900.5")])
    assert [(m.name, m.dur_ms) for m in metrics] == [("queue", 4.0), ("decode", 900.5)]


def test_first_dur_wins_and_parameter_names_are_case_insensitive() -> None:
    (first,) = parse_server_timing_value("a;DUR=3;dur=7")
    assert first.dur_ms == 3.0


def test_whitespace_around_separators_and_empty_members_are_accepted() -> None:
    metrics = parse_server_timing_value(" a ; dur = 5 ,, b\t;dur=0.25 ,")
    assert [(m.name, m.dur_ms) for m in metrics] == [("a", 5.0), ("b", 0.25)]


def test_quoted_dur_is_read() -> None:
    assert parse_server_timing_value('a;dur="12.5"')[0].dur_ms == 12.5


def test_unreadable_dur_is_ignored_with_a_warning() -> None:
    warnings: list[str] = []
    (metric,) = parse_server_timing_value("a;dur=abc", warnings=warnings)
    assert metric.dur_ms is None
    assert len(warnings) == 1 and "dur='abc'" in warnings[0]


def test_negative_or_missing_dur_value_is_ignored_with_a_warning() -> None:
    warnings: list[str] = []
    metrics = parse_server_timing_value("a;dur=-1, b;dur", warnings=warnings)
    assert [m.dur_ms for m in metrics] == [None, None]
    assert len(warnings) == 2


def test_member_without_name_is_skipped_and_the_rest_is_read() -> None:
    warnings: list[str] = []
    metrics = parse_server_timing_value(';dur=1, b;dur=2, "x";dur=3, c;dur=4', warnings=warnings)
    assert [(m.name, m.dur_ms) for m in metrics] == [("b", 2.0), ("c", 4.0)]
    assert len(warnings) == 2


def test_junk_after_a_metric_skips_to_the_next_member() -> None:
    warnings: list[str] = []
    metrics = parse_server_timing_value("a;dur=1 junk, b;dur=2", warnings=warnings)
    assert [(m.name, m.dur_ms) for m in metrics] == [("a", 1.0), ("b", 2.0)]
    assert warnings


def test_unterminated_quoted_string_ignores_the_parameter() -> None:
    warnings: list[str] = []
    (metric,) = parse_server_timing_value('a;dur=1;desc="open', warnings=warnings)
    assert metric.dur_ms == 1.0 and metric.desc is None
    assert warnings


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    warnings: list[str] = []
    for metric in parse_server_timing_value(text, warnings=warnings):
        assert metric.name
        assert metric.dur_ms is None or metric.dur_ms >= 0


_token = st.text(alphabet=sorted(TCHARS), min_size=1, max_size=12)
_desc = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.just("\t"), max_size=20)
_metric = st.builds(
    ServerTimingMetric,
    name=_token,
    dur_ms=st.none() | st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False),
    desc=st.none() | _desc,
)


@given(st.lists(_metric, max_size=6))
def test_formatted_metrics_parse_back_to_the_same_values(metrics: list[ServerTimingMetric]) -> None:
    warnings: list[str] = []
    parsed = parse_server_timing_value(format_server_timing(metrics), warnings=warnings)
    assert [(m.name, m.dur_ms, m.desc) for m in parsed] == [(m.name, m.dur_ms, m.desc) for m in metrics]
    assert warnings == []


_ows = st.sampled_from(["", " ", "\t", " \t "])
_plain_param = st.tuples(_ows, _token, st.none() | st.tuples(_ows, _ows, _token | st.sampled_from(["1", "0.5", "7e2"])))


@st.composite
def _plain_values(draw: st.DrawFn) -> str:
    """Field values of token-only metrics, with optional whitespace wherever the grammar allows it."""
    members = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(_ows) + draw(_token | st.sampled_from(["dur", "DUR", "desc"]))
        for lead, param, value in draw(st.lists(_plain_param, max_size=4)):
            name += lead + ";" + draw(_ows) + param
            if value is not None:
                before, after, token = value
                name += before + "=" + after + token
        members.append(name + draw(_ows))
    return ",".join(members)


@st.composite
def _duration_values(draw: st.DrawFn) -> str:
    """Field values of ``name;dur=number`` members, the shape servers write, with the numbers and spacing that sit
    on either side of the duration pattern (``5.``, ``.5``, ``007``, an exponent, a sign, ``DUR``)."""
    members = []
    for _ in range(draw(st.integers(1, 4))):
        digits = st.from_regex(r"\A[0-9]{0,3}(\.[0-9]{0,3})?\Z")
        number = draw(digits | st.sampled_from(["5.", ".5", "7e2", "-1", "+2"]))
        dur = draw(st.sampled_from(["dur", "dur", "DUR"]))
        parts = [draw(_ows), draw(_token), draw(_ows), ";", draw(_ows), dur, draw(_ows), "=", draw(_ows), number]
        members.append("".join(parts) + draw(_ows))
    return ",".join(members)


@given(
    _duration_values()
    | _plain_values()
    | st.text(alphabet=[*sorted(TCHARS), " ", "\t", ";", "=", ",", '"', "\\"], max_size=40)
)
def test_the_plain_split_reads_what_the_scanner_reads(value: str) -> None:
    fast_warnings: list[str] = []
    slow_warnings: list[str] = []
    assert parse_server_timing_value(value, warnings=fast_warnings) == _parse_scanned(value, slow_warnings)
    assert fast_warnings == slow_warnings


def test_values_servers_write_take_the_plain_split() -> None:
    assert _DURATIONS_VALUE.fullmatch("parse;dur=0.004, validate;dur=0.027, queue;dur=0.051, prefill;dur=0.046")
    assert not _DURATIONS_VALUE.fullmatch("db;dur=53, cache;dur=23.2;hit")  # a second parameter: the split
    assert not _DURATIONS_VALUE.fullmatch("db;dur=1e3")  # an exponent: the split, which reads it
    assert _PLAIN_VALUE.fullmatch("parse;dur=0.004, validate;dur=0.027, queue;dur=0.051, prefill;dur=0.046")
    assert _PLAIN_VALUE.fullmatch("db;dur=53, cache;dur=23.2;hit")
    assert not _PLAIN_VALUE.fullmatch('cache;desc="Cache Read";dur=23.2')  # a quoted string: the scanner
    assert not _PLAIN_VALUE.fullmatch("a,,b")  # an empty member: the scanner
