"""A bench request retried under ``--retries`` is drawn with its retries as a phase of their own."""

from __future__ import annotations

from latscope.report.html.waterfall import row_from_request

ROW = {
    "ok": True,
    "started_at_ms": 1000.0,
    # two refused attempts of 5 ms, each followed by a 120 ms wait
    "retried": [
        {"attempt": 1, "started_at_ms": 1000.0, "ended_at_ms": 1005.0, "status": 429, "wait_ms": 120.0},
        {"attempt": 2, "started_at_ms": 1125.0, "ended_at_ms": 1130.0, "status": 429, "wait_ms": 120.0},
    ],
    "attempts": 3,
    "retry_ms": 250.0,
    "retry_wait_ms": 240.0,
    "pool_ms": 0.1,
    "connect_ms": 0.3,
    "send_ms": 0.05,
    "wait_ms": 10.0,
    "ttfb_ms": 260.5,  # from the first attempt: the retries, then the last attempt's own 10.5 ms
    "ttft_ms": 262.0,
    "e2e_ms": 280.0,
}


def test_each_earlier_attempt_and_the_wait_after_it_come_first_then_the_last_attempts_phases() -> None:
    row = row_from_request(ROW, "#1")
    bars = [(s.phase, s.start_ms, s.ms) for s in row.client[:4]]
    assert bars == [("retry", 0.0, 5.0), ("backoff", 5.0, 120.0), ("retry", 125.0, 5.0), ("backoff", 130.0, 120.0)]
    connect = row.client[4]
    assert connect.phase == "connect" and connect.start_ms == 250.1
    wait = next(s for s in row.client if s.phase == "wait")
    assert wait.start_ms + wait.ms == 260.5
    assert "3 attempts" in row.facts


def test_without_the_attempts_listed_the_retries_are_one_bar() -> None:
    row = row_from_request({**ROW, "retried": None}, "#1")
    assert (row.client[0].phase, row.client[0].start_ms, row.client[0].ms) == ("retry", 0.0, 250.0)


def test_a_request_sent_once_has_no_retry_bar() -> None:
    row = row_from_request({**ROW, "attempts": 1, "retry_ms": 0.0, "retried": [], "ttfb_ms": 10.5}, "#2")
    assert all(s.phase not in ("retry", "backoff") for s in row.client) and "attempts" not in row.facts
