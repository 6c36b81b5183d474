"""``slow-request-parsing`` on hand-built evidence: per-MB server time against a fast parser's."""

from __future__ import annotations

import pytest

from latscope.checks.parsing import ParsePoint, ParsingEvidence, check_request_parsing
from latscope.findings import Clear, Confidence, Finding, Inconclusive, NotTested, Severity
from tests.checks.builders import REF, failed, ok

MB = 1024 * 1024
SIZES = (0.0, 0.5, 1.0, 2.0, 4.0)
#: orjson here: about half a millisecond per MB
FAST = tuple((int(s * MB) + 200, 0.5 * s + 0.01) for s in SIZES)


def points(
    ms_per_mb: float, *, base: float = 4.0, noise: tuple[float, ...] = (), reported: bool = False, repeats: int = 2
) -> tuple[ParsePoint, ...]:
    out = []
    for r in range(repeats):
        for i, size in enumerate(SIZES):
            extra = noise[(r * len(SIZES) + i) % len(noise)] if noise else 0.0
            server = base + ms_per_mb * size + extra
            out.append(ParsePoint(int(size * MB) + 200, server, 0.1, ms_per_mb * size if reported else None))
    return tuple(out)


#: receiving a body (bodies rejected at their first byte): 2 ms per MB
CONTROL = points(2.0, base=3.0)


def test_finding_when_the_server_spends_far_more_per_mb_than_a_fast_parser() -> None:
    noisy = points(65.0, noise=(0.0, 0.4, -0.3, 0.2, 0.1))
    ev = ParsingEvidence(padding="user", points=noisy, control=CONTROL, fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Finding) and out.id == "slow-request-parsing"
    assert 61.0 < out.cost_ms < 64.0  # the server's slope minus receiving (2) minus the fast parser's 0.5 ms/MB
    assert out.severity is Severity.HIGH  # 62 ms per MB against a 10 ms TTFT
    assert out.evidence["fast_parser_ms_per_mb"] == 0.5 and out.evidence["receive_ms_per_mb"] == 2.0
    assert out.evidence["r2"] > 0.99 and out.confidence is Confidence.HIGH


def test_receiving_cost_is_subtracted_so_a_slow_link_is_not_slow_parsing() -> None:
    # 14 ms per MB of server time, all of it spent receiving (TLS, HTTP/2 frames, a slow uplink)
    ev = ParsingEvidence(padding="user", points=points(14.0), control=points(13.5), fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Clear) and out.evidence["receive_ms_per_mb"] == 13.5


def test_without_a_usable_control_a_finding_is_medium_confidence() -> None:
    ev = ParsingEvidence(padding="user", points=points(65.0), fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM
    assert "no usable control" in out.cost_basis


def test_server_reported_parse_time_that_agrees_gives_high_confidence_for_a_remote_target() -> None:
    ev = ParsingEvidence(padding="user", points=points(40.0, reported=True), fast_parser=FAST, rtt_ms=30.0)
    assert ev.control == ()
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.HIGH
    assert "upload still in flight" in out.cost_basis and out.evidence["server_reported_parse_ms_per_mb"] == 40.0
    assert out.cost_ms == 39.5


def test_remote_target_without_server_report_is_medium_confidence() -> None:
    ev = ParsingEvidence(padding="user", points=points(40.0), fast_parser=FAST, rtt_ms=30.0)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Finding) and out.confidence is Confidence.MEDIUM


def test_clear_when_the_server_is_about_as_fast_as_the_parser() -> None:
    ev = ParsingEvidence(padding="user", points=points(1.5, noise=(0.0, 0.3, -0.2)), fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Clear) and "below" in out.reason


def test_one_slow_hiccup_does_not_turn_a_fast_server_into_a_finding() -> None:
    # a 25 ms stall on one 4 MB request (a busy host) moves the all-requests line, not the fastest-repeat line
    noisy = list(points(1.5))
    noisy[4] = ParsePoint(noisy[4].body_bytes, noisy[4].server_ms + 25.0)
    out = check_request_parsing(ParsingEvidence(padding="user", points=tuple(noisy), fast_parser=FAST), REF)
    assert not isinstance(out, Finding)


def test_inconclusive_when_fastest_and_all_requests_disagree_across_the_threshold() -> None:
    # the fastest repeats say 3 ms/MB, but three of four repeats are much slower: the all-requests line is steep
    fast_run = points(3.0, repeats=1)
    slow_run = points(30.0, repeats=3)
    out = check_request_parsing(ParsingEvidence(padding="user", points=fast_run + slow_run, fast_parser=FAST), REF)
    assert isinstance(out, Inconclusive) and "more samples" in out.reason


def test_not_tested_when_the_server_refuses_padding() -> None:
    ev = ParsingEvidence(
        padding=None,
        rejected="user: HTTP 400: unknown field; whitespace: HTTP 400: bad JSON",
        probe_failures=(failed("probe user padding", status=400),),
    )
    out = check_request_parsing(ev, REF)
    assert isinstance(out, NotTested) and "HTTP 400" in out.reason


def test_not_tested_with_too_few_sizes_names_the_size_limit() -> None:
    few = tuple(p for p in points(10.0) if p.body_bytes < 1 * MB)
    ev = ParsingEvidence(
        padding="user",
        points=few,
        fast_parser=FAST,
        size_limit_bytes=MB // 2,
        failures=(failed("pad 1 MB", status=413, message="HTTP 413: too large"),),
    )
    out = check_request_parsing(ev, REF)
    assert isinstance(out, NotTested) and "0.50 MB" in out.reason


def test_not_tested_when_the_target_misbehaves_during_the_experiment() -> None:
    ev = ParsingEvidence(
        padding="user",
        points=points(10.0, repeats=1),
        fast_parser=FAST,
        failures=tuple(failed(f"pad {i}") for i in range(4)),
    )
    out = check_request_parsing(ev, REF)
    assert isinstance(out, NotTested) and "rate limited" in out.reason


def test_expected_refusals_are_not_misbehaviour() -> None:
    ev = ParsingEvidence(
        padding="whitespace",
        points=points(65.0),
        fast_parser=FAST,
        probe_failures=(failed("probe user padding", status=400),),
        failures=(failed("pad 8 MB", status=413),),
        size_limit_bytes=4 * MB,
    )
    assert isinstance(check_request_parsing(ev, REF), Finding)


def test_a_refused_padded_request_is_misbehaviour_even_when_its_label_says_probe() -> None:
    ev = ParsingEvidence(
        padding="user",
        points=points(65.0, repeats=1),
        fast_parser=FAST,
        failures=tuple(failed(f"probe {i}", status=400) for i in range(4)),
    )
    out = check_request_parsing(ev, REF)
    assert isinstance(out, NotTested) and "misbehaved" in out.reason


def test_a_sample_is_ok_without_an_error() -> None:
    assert ok().ok and not failed().ok


def test_work_done_while_the_client_was_still_writing_counts_through_the_control() -> None:
    # a server sharing the client's event loop (or one reading slowly) parses while the client's write still blocks:
    # the time lands in send_ms, not wait_ms; timed from the upload's start against the control, it is still seen
    blocked = tuple(ParsePoint(int(s * MB) + 200, 4.0, 65.0 * s) for s in SIZES for _ in range(2))
    control = tuple(ParsePoint(int(s * MB) + 200, 3.0, 2.0 * s) for s in SIZES for _ in range(2))
    out = check_request_parsing(ParsingEvidence(padding="user", points=blocked, control=control, fast_parser=FAST), REF)
    assert isinstance(out, Finding) and out.cost_ms == pytest.approx(62.5)
    assert out.evidence["timed_from"] == "upload start (send + wait)"


def test_repeats_of_one_padding_size_group_even_when_their_prompts_differ_by_a_few_bytes() -> None:
    # the fast repeat of each size is the server's cost; the slow repeats were a busy host
    fast = tuple(ParsePoint(int(s * MB) + 200, 4.0 + 2.0 * s) for s in SIZES)
    slow = tuple(ParsePoint(int(s * MB) + 213, 4.0 + 40.0 * s) for s in SIZES)
    out = check_request_parsing(ParsingEvidence(padding="user", points=fast + slow, fast_parser=FAST), REF)
    assert out.evidence["server_ms_per_mb_fastest"] == pytest.approx(2.0)
    assert not isinstance(out, Finding)


def test_a_server_whose_own_parse_timing_is_cheap_contradicts_the_client_side_slope() -> None:
    # 40 ms per MB between upload and first byte, but the server times its parse + validate at 2 ms per MB: the time
    # went elsewhere on the path (measured through nginx: a proxy hop stalling a large body), not into parsing
    slow = points(40.0)
    cheap = tuple(ParsePoint(p.body_bytes, p.server_ms, p.send_ms, 2.0 * p.body_bytes / MB) for p in slow)
    out = check_request_parsing(ParsingEvidence(padding="user", points=cheap, control=CONTROL, fast_parser=FAST), REF)
    assert isinstance(out, Inconclusive) and "elsewhere on the path" in out.reason
    assert out.evidence["server_reported_parse_ms_per_mb"] == 2.0


def test_an_excess_within_a_few_times_the_receiving_cost_is_inconclusive() -> None:
    # a busy host stretches receiving and parsing alike: 20 ms/MB of server time against 7 ms/MB to receive the
    # bytes is not the mark of a slow parser (measured: llama-cpp-python on an oversubscribed 2-core host)
    ev = ParsingEvidence(padding="user", points=points(20.0), control=points(7.0, base=3.0), fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Inconclusive) and "busy host" in out.reason
    assert out.evidence["receive_ms_per_mb"] == 7.0


def remote(parse_ms_per_mb: float, *, control: bool, noise: tuple[float, ...] = (0.0,)) -> tuple[ParsePoint, ...]:
    """Bodies over a path 40 ms away, each on a new connection: the upload takes slow-start rounds (a step of 160
    ms up to 0.5 MB, then 40 ms per MB), the same for a valid body and its control; the server then parses the valid
    ones at ``parse_ms_per_mb`` (the control is rejected at byte 0)."""
    out = []
    for r in range(3):
        for i, size in enumerate(SIZES):
            upload = 0.0 if size == 0 else 160.0 + 40.0 * size
            extra = noise[(r * len(SIZES) + i) % len(noise)]
            parse = 0.0 if control else 2.0 + parse_ms_per_mb * size
            # the client's write covers part of the upload (send_ms), the rest shows as wait: split it
            out.append(ParsePoint(int(size * MB) + 200 + r * 4099, 40.0 + upload * 0.5 + parse + extra, upload * 0.5,
                                  reused=False))  # fmt: skip
    return tuple(out)


def test_bodies_over_a_remote_path_are_judged_by_their_time_beyond_the_same_bytes_rejected() -> None:
    # a fast server 40 ms away: its upload's step and per-MB cost are the path's, and the control shares them
    ev = ParsingEvidence(
        padding="user", points=remote(2.0, control=False), control=remote(0.0, control=True), fast_parser=FAST,
        rtt_ms=40.0,
    )  # fmt: skip
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Clear), out
    assert "paired" in out.evidence["timed_from"] and out.evidence["receive_ms_per_mb"] > 30.0


def test_slow_parsing_is_found_beyond_a_slow_link_whose_receiving_dwarfs_it() -> None:
    # the receiving cost (a 20 Mbit/s link: 400 ms per MB) is the network's, not the server's CPU: it does not hide a
    # parser that costs 60 ms per MB
    slow_link = tuple(
        ParsePoint(p.body_bytes, p.server_ms + 360.0 * p.body_bytes / MB, p.send_ms, reused=False)
        for p in remote(60.0, control=False)
    )
    control = tuple(
        ParsePoint(p.body_bytes, p.server_ms + 360.0 * p.body_bytes / MB, p.send_ms, reused=False)
        for p in remote(0.0, control=True)
    )
    out = check_request_parsing(
        ParsingEvidence(padding="user", points=slow_link, control=control, fast_parser=FAST), REF
    )
    assert isinstance(out, Finding) and 55.0 < out.cost_ms < 62.0


def test_a_difference_that_does_not_grow_in_a_line_is_not_a_finding() -> None:
    # the valid bodies went over warmer connections for some sizes and colder for others: a jumpy difference
    steps = dict(zip(SIZES, (0.0, 300.0, 0.0, 40.0, 400.0), strict=True))
    jumpy = tuple(
        ParsePoint(p.body_bytes, p.server_ms + steps[round(p.body_bytes / MB * 2) / 2], p.send_ms, reused=False)
        for p in remote(0.0, control=False)
    )
    ev = ParsingEvidence(padding="user", points=jumpy, control=remote(0.0, control=True), fast_parser=FAST)
    assert isinstance(check_request_parsing(ev, REF), Inconclusive)


def test_one_stalled_request_does_not_bend_a_line_its_repeats_draw() -> None:
    # a busy host stalled one 0.5 MB request by 900 ms: the line through every request bends (R² well under 0.8),
    # the line through each size's fastest does not, and the parser's 60 ms per MB is still found
    stalled = tuple(
        ParsePoint(p.body_bytes, p.server_ms + (900.0 if i == 1 else 0.0), p.send_ms, reused=False)
        for i, p in enumerate(remote(60.0, control=False))
    )
    ev = ParsingEvidence(padding="user", points=stalled, control=remote(0.0, control=True), fast_parser=FAST)
    out = check_request_parsing(ev, REF)
    assert isinstance(out, Finding), out
    assert out.evidence["r2"] < 0.8 < out.evidence["r2_fastest"]
