"""Retries of a logical request: which outcomes go again, how long the client waits, and what it sends each time."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from latscope.dialects.openai import chat_request
from latscope.timeline import dumps, loads
from latscope.timeline.model import Attempt, ErrorKind, EventKind, Phase, RequestError, StreamEvent, Timeline
from latscope.wire import Client, RetryPolicy, request_with_retries
from latscope.wire.retry import IDEMPOTENCY_HEADER, decide
from tests.support.load_sse_server import Script, ScriptedServer

pytestmark = pytest.mark.timeout(30)


# -- backoff ----------------------------------------------------------------------------------------------------------
def test_the_backoff_ceiling_doubles_per_retry_up_to_its_cap() -> None:
    policy = RetryPolicy(retries=9, backoff_s=0.5, max_backoff_s=8.0)
    assert [policy.backoff_ceiling_s(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_full_jitter_draws_below_the_ceiling_and_a_seed_repeats_them() -> None:
    policy = RetryPolicy(retries=3, backoff_s=1.0)
    first = [policy.wait_s(n, None, random.Random(7)) for n in (1, 2, 3)]
    again = [policy.wait_s(n, None, random.Random(7)) for n in (1, 2, 3)]
    assert first == again
    rng = random.Random(1)
    draws = [policy.wait_s(2, None, rng) for _ in range(2000)]
    assert all(0.0 <= d <= 2.0 for d in draws)
    assert 0.8 < sum(draws) / len(draws) < 1.2  # uniform over [0, 2 s]: mean 1 s, not the ceiling


def test_the_wait_is_never_shorter_than_the_servers_retry_after() -> None:
    policy = RetryPolicy(retries=3, backoff_s=0.1)
    rng = random.Random(3)
    assert all(policy.wait_s(1, 1.5, rng) == 1.5 for _ in range(100))  # the draw is at most 0.1 s


def test_a_retry_after_shorter_than_the_draw_leaves_the_draw() -> None:
    policy = RetryPolicy(retries=3, backoff_s=4.0)
    assert policy.wait_s(2, 0.001, random.Random(5)) == policy.wait_s(2, None, random.Random(5)) > 0.001


# -- what is retried --------------------------------------------------------------------------------------------------
def _failed(status: int | None = None, kind: ErrorKind = ErrorKind.HTTP_STATUS, **headers: str) -> Timeline:
    t = Timeline(started_ns=1)
    t.status = status
    t.response_headers = {k.replace("_", "-"): v for k, v in headers.items()}
    t.error = RequestError(Phase.HEADERS if status is None else Phase.STREAM, kind, "failed", 2, status)
    t.ended_ns = 2
    return t


def _with_tokens(t: Timeline) -> Timeline:
    t.events = [StreamEvent(2, 0, EventKind.CONTENT, 3, 1, None)]
    t.first_token_ns = 2
    return t


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_refusals_and_gateway_failures_are_retried(status: int) -> None:
    assert decide(_failed(status), keyed=False).retry


@pytest.mark.parametrize("status", [400, 401, 404, 500])
def test_other_statuses_are_not_retried(status: int) -> None:
    assert not decide(_failed(status), keyed=False).retry


def test_x_should_retry_false_wins_over_a_retryable_status() -> None:
    decision = decide(_failed(429, retry_after="1", x_should_retry="false"), keyed=False)
    assert not decision.retry and decision.should_retry is False


def test_x_should_retry_true_makes_any_status_retryable() -> None:
    assert decide(_failed(500, x_should_retry="true"), keyed=False).retry


def test_the_servers_wait_is_read_from_retry_after_ms_first() -> None:
    decision = decide(_failed(429, retry_after="2", retry_after_ms="1234"), keyed=False)
    assert decision.retry_after_s == pytest.approx(1.234)


def test_a_connection_lost_before_any_token_is_retried() -> None:
    assert decide(_failed(None, ErrorKind.RESET), keyed=False).retry
    assert not decide(_failed(None, ErrorKind.CERT_VERIFY), keyed=False).retry


def test_a_stream_cut_after_tokens_is_retried_only_with_an_idempotency_key() -> None:
    assert not decide(_with_tokens(_failed(None, ErrorKind.RESET)), keyed=False).retry
    assert decide(_with_tokens(_failed(None, ErrorKind.RESET)), keyed=True).retry


def test_a_conflict_is_retried_only_with_an_idempotency_key() -> None:
    assert not decide(_failed(409), keyed=False).retry
    assert decide(_failed(409), keyed=True).retry


# -- on the wire ------------------------------------------------------------------------------------------------------
async def test_a_refused_request_is_sent_again_no_sooner_than_retry_after_and_answered() -> None:
    script = Script(status=lambda n: 429 if n < 2 else None, error_headers=lambda n: {"retry-after-ms": "150"})
    policy = RetryPolicy(retries=3, backoff_s=0.0)
    async with ScriptedServer(script) as server, Client() as client:
        t = await request_with_retries(client, chat_request("scripted", "hi", 2), server.url, policy)
        arrivals = [at for at, _ in server.seen]
    assert t.ok and t.attempt == 3
    assert [a.status for a in t.retries] == [429, 429]
    assert all(a.retry_after_ms == pytest.approx(150.0) for a in t.retries)
    # the server saw each retry at least the 150 ms it asked for after the refused one
    assert all(b - a >= 150_000_000 for a, b in itertools.pairwise(arrivals))
    assert all(a.wait_ns >= 150_000_000 for a in t.retries)


async def test_retries_stop_after_the_allowed_number() -> None:
    script = Script(status=lambda n: 503)
    async with ScriptedServer(script) as server, Client() as client:
        policy = RetryPolicy(retries=2, backoff_s=0.01)
        t = await request_with_retries(client, chat_request("scripted", "hi", 2), server.url, policy)
    assert not t.ok and t.status == 503
    assert t.attempt == 3 and server.requests == 3


async def test_x_should_retry_false_is_honoured_on_the_wire() -> None:
    script = Script(status=lambda n: 429, error_headers=lambda n: {"x-should-retry": "false", "retry-after": "0"})
    async with ScriptedServer(script) as server, Client() as client:
        t = await request_with_retries(client, chat_request("scripted", "hi", 2), server.url, RetryPolicy(retries=5))
    assert t.status == 429 and t.attempt == 1 and server.requests == 1


async def test_a_longer_retry_after_than_the_limit_ends_the_request() -> None:
    script = Script(status=lambda n: 429, error_headers=lambda n: {"retry-after": "120"})
    async with ScriptedServer(script) as server, Client() as client:
        policy = RetryPolicy(retries=5, max_wait_s=1.0)
        t = await request_with_retries(client, chat_request("scripted", "hi", 2), server.url, policy)
    assert t.attempt == 1 and server.requests == 1
    assert any("120 s" in w for w in t.warnings)


async def test_one_idempotency_key_goes_with_every_attempt_and_each_request_has_its_own() -> None:
    script = Script(status=lambda n: 503 if n % 2 == 0 else None)  # every logical request: refused once, then served
    policy = RetryPolicy(retries=2, backoff_s=0.0, idempotency_keys=True)
    async with ScriptedServer(script) as server, Client() as client:
        answers = [
            await request_with_retries(client, chat_request("scripted", f"hi {i}", 2), server.url, policy)
            for i in range(3)
        ]
        keys = [headers.get(IDEMPOTENCY_HEADER) for _, headers in server.seen]
    assert all(t.ok and t.attempt == 2 for t in answers)
    assert len(keys) == 6 and None not in keys
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[4] == keys[5]  # the same on both attempts …
    assert len({keys[0], keys[2], keys[4]}) == 3  # … and distinct between requests
    assert [t.idempotency_key for t in answers] == [keys[0], keys[2], keys[4]]


async def test_without_the_option_no_idempotency_key_is_sent() -> None:
    script = Script(status=lambda n: 503 if n == 0 else None)
    async with ScriptedServer(script) as server, Client() as client:
        t = await request_with_retries(
            client, chat_request("scripted", "hi", 2), server.url, RetryPolicy(retries=1, backoff_s=0.0)
        )
        keys = [headers.get(IDEMPOTENCY_HEADER) for _, headers in server.seen]
    assert t.ok and keys == [None, None] and t.idempotency_key is None


async def test_a_stream_reset_after_tokens_is_not_sent_again_without_a_key() -> None:
    script = Script(tokens=6, reset_after=lambda n: 2 if n == 0 else None)
    async with ScriptedServer(script) as server, Client() as client:
        t = await request_with_retries(
            client, chat_request("scripted", "hi", 6), server.url, RetryPolicy(retries=3, backoff_s=0.0)
        )
    assert not t.ok and t.attempt == 1 and server.requests == 1


async def test_with_a_key_a_stream_reset_after_tokens_is_sent_again() -> None:
    script = Script(tokens=6, reset_after=lambda n: 2 if n == 0 else None)
    policy = RetryPolicy(retries=3, backoff_s=0.0, idempotency_keys=True)
    async with ScriptedServer(script) as server, Client() as client:
        t = await request_with_retries(client, chat_request("scripted", "hi", 6), server.url, policy)
    assert t.ok and t.attempt == 2 and t.retries[0].tokens == 2


def test_the_earlier_attempts_survive_serialisation() -> None:
    t = _failed(503)
    t.idempotency_key = "k-1"
    t.retries = [
        Attempt(
            1, 10, 20, 429, RequestError(Phase.STREAM, ErrorKind.HTTP_STATUS, "slow down", 20, 429), 0, 150.0, None, 5
        )
    ]
    back = loads(dumps(t))
    assert back.retries == t.retries and back.idempotency_key == "k-1" and back.attempt == 2
    assert back.logical_started_ns == 10


async def test_cancelled_while_waiting_the_timeline_keeps_the_last_attempt_and_says_so() -> None:
    script = Script(status=lambda n: 429, error_headers=lambda n: {"retry-after": "5"})
    t = Timeline()
    async with ScriptedServer(script) as server, Client() as client:
        task = asyncio.ensure_future(
            request_with_retries(
                client, chat_request("scripted", "hi", 2), server.url, RetryPolicy(retries=3), timeline=t
            )
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert t.status == 429 and t.error is not None and server.requests == 1
    assert t.warnings == ["cancelled while waiting to send retry 1"]
