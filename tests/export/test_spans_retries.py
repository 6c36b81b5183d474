"""A bench request retried under ``--retries`` as spans: the request span covers its retries, a ``retry`` phase
first."""

from __future__ import annotations

import itertools

from latscope.export.spans import row_spans

ROW = {
    "step": 0,
    "request_id": 7,
    "class": "default",
    "ok": True,
    "started_ns": 1_000_000_000,  # the first attempt's start
    "started_at_ms": 500.0,
    "attempts": 2,
    "retry_ms": 130.0,
    "retry_wait_ms": 125.0,
    "retried": [
        {"attempt": 1, "started_at_ms": 500.0, "ended_at_ms": 505.0, "status": 429, "wait_ms": 125.0, "tokens": 0}
    ],
    "idempotency_key": "0b9f6c1e-3d1a-4c55-9d1f-6c1e3d1a4c55",
    "pool_ms": 0.0,
    "setup_ms": 0.1,
    "send_ms": 0.1,
    "wait_ms": 9.8,
    "ttfb_ms": 140.0,  # from the first attempt: 130 ms of retries, then the last attempt's 10 ms
    "ttft_ms": 141.0,
    "e2e_ms": 160.0,
    "status": 200,
    "output_tokens": 4,
    "output_tokens_source": "usage",
}


def test_the_request_span_starts_at_the_first_attempt_and_the_retries_are_its_first_phase() -> None:
    spans = row_spans(ROW, url="http://127.0.0.1:1/v1", model="m", dialect="openai.chat", clock_offset_ns=0)
    request, phases = spans[0], spans[1:]
    assert request.start_ns == 1_000_000_000 and request.end_ns == 1_160_000_000
    retry = phases[0]
    assert retry.attributes["latscope.phase"] == "retry"
    assert (retry.start_ns, retry.end_ns) == (1_000_000_000, 1_130_000_000)
    assert phases[-1].end_ns == request.end_ns  # the phases still partition the request span
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(phases))
    assert request.attributes["latscope.attempts"] == 2 and request.attributes["latscope.retry_ms"] == 130.0
    assert request.attributes["latscope.idempotency_key"] == ROW["idempotency_key"]
