"""W3C Trace Context: traceparent validation and generation, tracestate members."""

from __future__ import annotations

import pytest

from latscope.signals.tracecontext import (
    MAX_TRACESTATE_MEMBERS,
    TraceParent,
    format_tracestate,
    new_traceparent,
    parse_traceparent,
    parse_tracestate,
)

SPEC_EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_spec_example_is_parsed() -> None:
    parent = parse_traceparent(SPEC_EXAMPLE)
    assert parent == TraceParent("00", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
    assert parent.sampled and parent.header_value() == SPEC_EXAMPLE


def test_unsampled_flags() -> None:
    parent = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
    assert parent is not None and not parent.sampled


@pytest.mark.parametrize(
    "value",
    [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper-case hex
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 with a fifth field
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # trace id one digit short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",  # one-digit flags
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",  # non-hex flags
        "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # too few fields
        "",
    ],
)
def test_invalid_traceparent_is_ignored_with_a_warning(value: str) -> None:
    warnings: list[str] = []
    assert parse_traceparent(value, warnings=warnings) is None
    assert len(warnings) == 1


def test_a_future_version_is_read_for_its_first_four_fields() -> None:
    parent = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds")
    assert parent is not None and parent.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_new_traceparent_is_valid_random_and_returns_its_trace_id() -> None:
    value, trace_id = new_traceparent()
    parent = parse_traceparent(value)
    assert parent is not None and parent.trace_id == trace_id and parent.sampled
    assert len(value) == 55
    assert new_traceparent()[1] != trace_id
    unsampled, _ = new_traceparent(sampled=False)
    assert unsampled.endswith("-00")


def test_tracestate_members_in_order() -> None:
    members = parse_tracestate("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7,,fw529a3039@dt=FzkB-2uH2dM")
    assert members == [("congo", "t61rcWkgMzE"), ("rojo", "00f067aa0ba902b7"), ("fw529a3039@dt", "FzkB-2uH2dM")]
    assert format_tracestate(members) == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7,fw529a3039@dt=FzkB-2uH2dM"


def test_invalid_and_repeated_members_are_dropped_with_warnings() -> None:
    warnings: list[str] = []
    members = parse_tracestate("Upper=x,ok=1,novalue,sp=a=b,ok=2,trailing=x ", warnings=warnings)
    assert members == [("ok", "1"), ("trailing", "x")]
    assert len(warnings) == 4


def test_more_than_32_members_are_cut_with_a_warning() -> None:
    warnings: list[str] = []
    value = ",".join(f"k{i}=v{i}" for i in range(40))
    members = parse_tracestate(value, warnings=warnings)
    assert len(members) == MAX_TRACESTATE_MEMBERS and members[-1] == ("k31", "v31")
    assert len(warnings) == 1
