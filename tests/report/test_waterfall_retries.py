"""A bench request retried under ``--retries`` is drawn with its retries as a phase of their own."""

from __future__ import annotations

from latscope.report.html.waterfall import row_from_request

ROW = {
    "ok": True,
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


def test_the_retries_come_first_and_the_last_attempts_phases_follow_them() -> None:
    row = row_from_request(ROW, "#1")
    first, connect = row.client[0], row.client[1]
    assert (first.phase, first.start_ms, first.ms) == ("retry", 0.0, 250.0)
    assert connect.phase == "connect" and connect.start_ms == 250.1
    wait = next(s for s in row.client if s.phase == "wait")
    assert wait.start_ms + wait.ms == 260.5
    assert "3 attempts" in row.facts


def test_a_request_sent_once_has_no_retry_bar() -> None:
    row = row_from_request({**ROW, "attempts": 1, "retry_ms": 0.0, "ttfb_ms": 10.5}, "#2")
    assert all(s.phase != "retry" for s in row.client) and "attempts" not in row.facts
