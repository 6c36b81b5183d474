"""Which keyed, retried logical requests the server generated a second time, from the rows of ``requests``."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from latscope.load.summary import executed_again
from latscope.runs.records import ATTEMPT_TYPE


def _attempt(response_id: str | None, tokens: int) -> dict[str, Any]:
    return {"attempt": 1, "started_at_ms": 0.0, "ended_at_ms": 1.0, "status": 200, "error_phase": "stream",
            "error_kind": "timeout", "error_message": "cut", "tokens": tokens, "retry_after_ms": None,
            "should_retry": None, "wait_ms": 5.0, "response_id": response_id}  # fmt: skip


def _rows(*requests: tuple[str | None, list[dict[str, Any]]]) -> pa.Table:
    return pa.table(
        {
            "response_id": pa.array([final for final, _ in requests], pa.string()),
            "retried": pa.array([earlier for _, earlier in requests], pa.list_(ATTEMPT_TYPE)),
        }
    )


def test_a_retry_answered_with_the_begun_response_is_a_replay() -> None:
    assert executed_again(_rows(("chatcmpl-a", [_attempt("chatcmpl-a", 5)]))) == 0


def test_a_retry_answered_with_another_response_was_generated_again() -> None:
    rows = _rows(
        ("chatcmpl-b", [_attempt("chatcmpl-a", 5)]),
        ("chatcmpl-d", [_attempt(None, 0), _attempt("chatcmpl-c", 3)]),
        ("chatcmpl-e", [_attempt("chatcmpl-e", 2)]),
    )
    assert executed_again(rows) == 2


def test_nothing_is_counted_without_a_begun_stream_or_an_id() -> None:
    rows = _rows(
        ("chatcmpl-b", [_attempt("chatcmpl-a", 0)]),  # refused before any token: nothing had run
        ("chatcmpl-b", [_attempt(None, 4)]),  # the first stream named no id
        (None, [_attempt("chatcmpl-a", 4)]),  # the last one named none
    )
    assert executed_again(rows) == 0
    assert executed_again(pa.table({"retried": pa.array([[]], pa.list_(ATTEMPT_TYPE))})) == 0  # older runs
