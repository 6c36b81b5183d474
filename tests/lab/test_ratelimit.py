"""The gateway's token-bucket rate limiter, on an injected clock: what it admits, holds and refuses, and the headers
it answers with (read back with latscope's own rate-limit header parser)."""

from __future__ import annotations

import asyncio
import math

import pytest

from latscope.cli.lab import settings_from_options
from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.ratelimit import (
    LimitMode,
    RateLimitConfig,
    RateLimiter,
    go_duration,
    key_digest,
    limit_headers,
)
from latscope.lab.settings import LabSettings
from latscope.signals.ratelimit import rate_limit_state
from latscope.wire import Client


def _limiter(**config: object) -> RateLimiter:
    return RateLimiter(RateLimitConfig(**config))  # type: ignore[arg-type]


def test_a_full_bucket_admits_a_minutes_quota_at_once_then_refuses() -> None:
    limiter = _limiter(requests_per_min=3)
    answers = [limiter.admit("k", 10, now_s=100.0) for _ in range(4)]
    assert [a.admitted for a in answers] == [True, True, True, False]
    assert all(a.wait_s == 0.0 for a in answers[:3])


def test_a_refusal_says_when_the_next_request_fits() -> None:
    limiter = _limiter(requests_per_min=60)  # one a second
    for _ in range(60):
        assert limiter.admit("k", 1, now_s=0.0).admitted
    refused = limiter.admit("k", 1, now_s=0.25)  # a quarter of a request refilled
    assert not refused.admitted and refused.retry_after_s == pytest.approx(0.75)
    assert limiter.admit("k", 1, now_s=1.0).admitted  # exactly when it said


def test_each_key_has_its_own_buckets() -> None:
    limiter = _limiter(requests_per_min=1)
    assert limiter.admit(key_digest(b"Bearer a"), 1, now_s=0.0).admitted
    assert not limiter.admit(key_digest(b"Bearer a"), 1, now_s=0.0).admitted
    assert limiter.admit(key_digest(b"Bearer b"), 1, now_s=0.0).admitted


def test_the_key_is_a_digest_never_the_credential() -> None:
    digest = key_digest(b"Bearer sk-secret")
    assert "sk-secret" not in digest and len(digest) == 64
    assert key_digest(None) == key_digest(b"")


def test_tokens_per_minute_counts_prompt_and_max_tokens() -> None:
    limiter = _limiter(tokens_per_min=600)  # 10 tokens a second
    assert limiter.admit("k", 500, now_s=0.0).admitted
    refused = limiter.admit("k", 200, now_s=0.0)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(10.0)  # 100 more tokens at 10/s
    assert limiter.admit("k", 100, now_s=0.0).admitted


def test_a_request_larger_than_the_bucket_never_fits() -> None:
    refused = _limiter(tokens_per_min=100).admit("k", 101, now_s=0.0)
    assert not refused.admitted and refused.retry_after_s == math.inf


def test_burst_sizes_the_bucket_while_the_rate_stays_the_limit() -> None:
    limiter = _limiter(requests_per_min=600, burst=2)  # 10 a second, 2 at once
    assert [limiter.admit("k", 1, now_s=0.0).admitted for _ in range(3)] == [True, True, False]
    assert limiter.admit("k", 1, now_s=0.1).admitted  # one refilled in 100 ms
    assert not limiter.admit("k", 1, now_s=0.1).admitted
    # a long pause refills only up to the burst
    assert [limiter.admit("k", 1, now_s=60.0).admitted for _ in range(3)] == [True, True, False]


def test_queue_mode_holds_requests_beyond_the_rate_one_refill_apart() -> None:
    limiter = _limiter(mode=LimitMode.QUEUE, requests_per_min=600, burst=1, max_wait_s=1.0)
    waits = [limiter.admit("k", 1, now_s=0.0).wait_s for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_queue_mode_refuses_once_the_wait_would_exceed_its_bound() -> None:
    limiter = _limiter(mode=LimitMode.QUEUE, requests_per_min=600, burst=1, max_wait_s=0.25)
    answers = [limiter.admit("k", 1, now_s=0.0) for _ in range(5)]
    assert [a.admitted for a in answers] == [True, True, True, False, False]
    assert answers[3].retry_after_s == pytest.approx(0.3)  # the three admitted ones are owed, the refused is not
    assert limiter.admit("k", 1, now_s=0.35).wait_s == pytest.approx(0.0, abs=1e-9)


def test_go_durations_are_written_as_openai_does() -> None:
    assert [go_duration(s) for s in (0.012, 1.0, 2.5, 360.0)] == ["12ms", "1s", "2.5s", "6m0s"]


def test_a_refusals_headers_read_back_as_an_exhausted_quota_with_retry_after() -> None:
    limiter = _limiter(requests_per_min=60, tokens_per_min=6000)
    for _ in range(60):
        limiter.admit("k", 10, now_s=0.0)
    refused = limiter.admit("k", 10, now_s=0.5)
    headers = [(k.decode(), v.decode()) for k, v in limit_headers(refused)]
    warnings: list[str] = []
    state = rate_limit_state(headers, now=0.0, warnings=warnings)
    assert warnings == []
    assert state.retry_after_s == pytest.approx(0.5) and state.retry_after_source == "retry-after-ms"
    assert dict(headers)["retry-after"] == "1"  # whole seconds, rounded up
    openai = state.window("requests", "openai")
    assert openai is not None and (openai.limit, openai.remaining) == (60, 0)
    assert openai.reset_s == pytest.approx(59.5, abs=0.01)
    ietf = state.window("requests", "ietf")
    assert ietf is not None and (ietf.limit, ietf.remaining, ietf.window_s, ietf.reset_s) == (60, 0, 60.0, 1.0)
    tokens = state.window("tokens", "openai")
    assert tokens is not None and tokens.remaining == 6000 - 600 + 50  # 50 tokens refilled in 0.5 s


def test_an_admissions_headers_carry_the_remaining_quota_and_no_retry_after() -> None:
    admitted = _limiter(requests_per_min=20).admit("k", 1, now_s=0.0)
    state = rate_limit_state([(k.decode(), v.decode()) for k, v in limit_headers(admitted)], now=0.0)
    window = state.window("requests", "openai")
    assert window is not None and (window.limit, window.remaining) == (20, 19)
    assert state.retry_after_s is None


def test_the_faults_configure_the_limiter_and_explicit_settings_win() -> None:
    assert not LabSettings().rate_limit().enabled
    reject = LabSettings(faults=("rate-limit",)).rate_limit()
    assert (reject.mode, reject.requests_per_min) == (LimitMode.REJECT, 20)
    queue = LabSettings(faults=("gateway-queue",)).rate_limit()
    assert (queue.mode, queue.requests_per_min, queue.burst) == (LimitMode.QUEUE, 600, 3)
    mine = LabSettings(faults=("rate-limit",), rate_limit_requests_per_min=5, rate_limit_tokens_per_min=99)
    assert (mine.rate_limit().requests_per_min, mine.rate_limit().tokens_per_min) == (5, 99)


# -- the lab's gateway ------------------------------------------------------------------------------------------------
async def test_the_rate_limit_fault_refuses_with_429_and_records_the_wait_it_asked_for() -> None:
    async with Lab(faults=("rate-limit",), cost=CostModel.zero()) as lab, Client() as client:
        answers = [await client.request(chat_request("lab-model", f"hi {i}", 1), lab.url) for i in range(21)]
        records = [r for r in lab.records if r.endpoint is not None]
    assert [t.status for t in answers] == [200] * 20 + [429]
    refused = answers[-1]
    state = rate_limit_state(refused.response_headers, now=0.0)
    window = state.window("requests", "openai")
    assert window is not None and (window.limit, window.remaining) == (20, 0)
    assert state.retry_after_s is not None and 0.0 < state.retry_after_s <= 3.0  # one request's refill at 20/min
    assert records[-1].status == 429 and records[-1].retry_after_ms == pytest.approx(state.retry_after_s * 1000, abs=1)
    first = rate_limit_state(answers[0].response_headers, now=0.0).window("requests", "openai")
    assert first is not None and first.remaining == 19  # successes carry the quota too
    assert all(r.gateway_wait_ms == 0.0 for r in records[:-1])


async def test_the_gateway_queue_fault_holds_requests_beyond_the_rate_before_the_scheduler() -> None:
    async with Lab(faults=("gateway-queue",), cost=CostModel.zero()) as lab, Client() as client:
        answers = await asyncio.gather(
            *(client.request(chat_request("lab-model", f"hi {i}", 1), lab.url) for i in range(6))
        )
        records = [r for r in lab.records if r.endpoint is not None]
    assert all(t.status == 200 for t in answers)
    waits = sorted(r.gateway_wait_ms or 0.0 for r in records)
    # a burst of 3 goes through, then one each 100 ms: 100, 200, 300 ms (the burst's own time refills a little)
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([100.0, 200.0, 300.0], abs=30.0)
    assert all((r.queue_ms or 0.0) < 20.0 for r in records)  # the engine's queue saw none of it


async def test_no_limiter_records_no_gateway_wait_and_sends_no_limit_headers() -> None:
    async with Lab(cost=CostModel.zero()) as lab, Client() as client:
        t = await client.request(chat_request("lab-model", "hi", 1), lab.url)
        record = lab.records[-1]
    assert rate_limit_state(t.response_headers, now=0.0).empty
    assert record.gateway_wait_ms is None and record.retry_after_ms is None


def test_the_lab_commands_flags_set_the_limiter() -> None:
    options = {
        "rate_limit_mode": "queue",
        "rate_limit_requests_per_min": 120,
        "rate_limit_tokens_per_min": 5000,
        "rate_limit_burst": 4,
        "rate_limit_max_wait_s": 0.0,
    }
    config = settings_from_options(options).rate_limit()
    assert config == RateLimitConfig(LimitMode.QUEUE, 120, 5000, burst=4, max_wait_s=0.0)
