"""Idempotency keys across lab replicas through a real Redis (Debian's redis-server, started by each test on a
private port and directory): two labs on two ports share one store, duplicates sent to both at once execute once,
a stream cut on one replica is answered on the other, and a Redis that goes away turns keyed requests into 503s,
never into second executions."""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.idemstore import StoredAnswer, StoreUnavailableError
from latscope.lab.process import LabProcess
from latscope.lab.records import RequestRecord
from tests.lab.rawhttp import RawConnection, chat_body, post
from tests.lab.test_idempotency import by_key, generation_records, paced, send, streamed_tokens
from tests.support.redis_server import RedisServer, redis_server


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
async def replicas(redis: RedisServer) -> AsyncIterator[tuple[Lab, Lab]]:
    """Two labs on two ports sharing the test's Redis."""
    async with (
        Lab(cost=paced(5.0), idempotency_store=redis.url) as first,
        Lab(cost=paced(5.0), idempotency_store=redis.url) as second,
    ):
        yield first, second


def both(labs: tuple[Lab, Lab]) -> list[RequestRecord]:
    return generation_records(labs[0]) + generation_records(labs[1])


# -- the store alone --------------------------------------------------------------------------------------------------
async def test_the_redis_store_claims_once_keeps_the_answer_and_releases_only_its_own(
    redis: RedisServer,
) -> None:
    from latscope.lab.redisstore import RedisStore

    store = RedisStore(redis.url)
    try:
        assert (await store.claim("k", "t1", "f", 60.0)).claimed
        running = await store.claim("k", "t2", "f", 60.0)
        assert (running.claimed, running.fingerprint, running.answer) == (False, "f", None)
        await store.release("k", "t2")  # not its claim: nothing happens
        assert not (await store.claim("k", "t3", "f", 60.0)).claimed
        stored = StoredAnswer(200, ((b"x-request-id", b"chatcmpl-1"),), b"{}", False, "chatcmpl-1", "f")
        await store.complete("k", "t1", stored, 60.0)
        assert (await store.claim("k", "t4", "f", 60.0)).answer == stored
        await store.claim("j", "t1", "f", 60.0)
        await store.release("j", "t1")
        assert (await store.claim("j", "t5", "f", 60.0)).claimed
    finally:
        await store.close()


async def test_a_lab_does_not_start_on_a_redis_that_does_not_answer(redis: RedisServer) -> None:
    url = redis.url
    redis.stop()
    with pytest.raises(StoreUnavailableError, match="redis at"):
        async with Lab(cost=CostModel.zero(), idempotency_store=url):
            pass


def test_a_password_in_the_store_url_is_never_shown() -> None:
    from latscope.lab.redisstore import redacted

    assert redacted("redis://user:s3cret@db:6379/0") == "redis://user:***@db:6379/0"
    assert redacted("redis://127.0.0.1:6379/1") == "redis://127.0.0.1:6379/1"


# -- two replicas ---------------------------------------------------------------------------------------------------
async def test_duplicates_sent_to_two_replicas_at_once_execute_each_key_once(replicas: tuple[Lab, Lab]) -> None:
    keys = [f"replica-{n:02d}" for n in range(50)]
    bodies = {key: chat_body(8, stream=n % 2 == 0, user=key) for n, key in enumerate(keys)}
    plan = [(keys[n % 50], replicas[n % 2]) for n in range(200)]  # each key twice to each replica
    random.Random(11).shuffle(plan)
    limits = httpx.Limits(max_connections=200)
    async with (
        httpx.AsyncClient(base_url=replicas[0].origin, limits=limits) as first,
        httpx.AsyncClient(base_url=replicas[1].origin, limits=limits) as second,
    ):
        clients = {id(replicas[0]): first, id(replicas[1]): second}
        responses = await asyncio.gather(*(send(clients[id(lab)], key, bodies[key]) for key, lab in plan))
    assert all(r.status_code == 200 for r in responses)
    answers: dict[str, list[httpx.Response]] = collections.defaultdict(list)
    for (key, _), response in zip(plan, responses, strict=True):
        answers[key].append(response)
    for key, group in answers.items():
        assert len({r.headers["x-request-id"] for r in group}) == 1, key
        assert len({r.content for r in group}) == 1, key
    assert by_key(both(replicas)) == {key: collections.Counter(executed=1, replayed=3) for key in keys}


async def test_a_stream_cut_on_one_replica_is_answered_whole_on_the_other(replicas: tuple[Lab, Lab]) -> None:
    first, second = replicas
    cut_ids: dict[str, str] = {}
    bodies = {f"cut-{n}": chat_body(30, stream=True, user=f"cut-{n}") for n in range(6)}
    for key, body in bodies.items():
        conn = await RawConnection.open(first.host, first.port)
        conn.send(post("/v1/chat/completions", body, extra_headers=[("idempotency-key", key)]))
        assert await conn.wait_for(b"data: ", timeout=5.0, count=2)
        head = conn.response.data.split(b"\r\n\r\n", 1)[0].decode()
        cut_ids[key] = next(line for line in head.split("\r\n") if line.startswith("x-request-id:")).split(": ")[1]
        conn.abort()
    async with httpx.AsyncClient(base_url=second.origin) as client:
        retries = await asyncio.gather(*(send(client, key, body) for key, body in bodies.items()))
    for key, retry in zip(bodies, retries, strict=True):
        assert retry.status_code == 200 and retry.headers["idempotent-replayed"] == "true"
        assert retry.headers["x-request-id"] == cut_ids[key]
        assert streamed_tokens(retry.content) == 30
    records = both(replicas)
    assert by_key(records) == {key: collections.Counter(executed=1, replayed=1) for key in bodies}
    assert all(r.cancelled for r in records if r.idempotency == "executed")


async def test_a_redis_stopped_midrun_answers_503_and_nothing_runs_twice(
    redis: RedisServer, replicas: tuple[Lab, Lab]
) -> None:
    first, second = replicas
    done_keys = [f"done-{n}" for n in range(5)]
    async with (
        httpx.AsyncClient(base_url=first.origin) as one,
        httpx.AsyncClient(base_url=second.origin) as two,
    ):
        finished = await asyncio.gather(*(send(one, key, chat_body(4)) for key in done_keys))
        assert all(r.status_code == 200 for r in finished)
        running = asyncio.create_task(send(one, "running", chat_body(40)))  # 200 ms at 5 ms a token
        await asyncio.sleep(0.05)
        await asyncio.to_thread(redis.stop)
        refused = await asyncio.gather(
            *(send(two, key, chat_body(4)) for key in done_keys),  # their retries: not run again
            send(two, "running", chat_body(40)),  # the duplicate of a running one
            send(two, "new", chat_body(4)),  # a new key: not run without its claim
        )
        original = await running
    assert original.status_code == 200  # the execution under way finishes for its client
    for response in refused:
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        error = response.json()["error"]
        assert error["code"] == "idempotency_store_unavailable" and "not executed" in error["message"]
    records = both(replicas)
    outcomes = by_key(records)
    assert all(outcome["executed"] == 1 for key, outcome in outcomes.items() if key != "new")
    assert outcomes["new"] == collections.Counter(unavailable=1)
    unavailable = [r for r in records if r.idempotency == "unavailable"]
    assert len(unavailable) == 7 and all(r.prefill_ms is None and r.status == 503 for r in unavailable)


# -- replicas behind one port ---------------------------------------------------------------------------------------
PACED_ARGS = ["--prefill-base-ms", "0.5", "--prefill-ms-per-token", "0", "--decode-base-ms", "5", "--decode-ms-per-seq"]


async def test_replicas_behind_one_port_share_redis_and_run_each_key_once(redis: RedisServer) -> None:
    args = ["--replicas", "2", "--idempotency-store", redis.url, *PACED_ARGS, "0"]
    keys = [f"port-{n:02d}" for n in range(40)]
    plan = [key for key in keys for _ in range(4)]
    random.Random(5).shuffle(plan)
    async with LabProcess(args=args, ready_timeout_s=60.0) as lab:
        assert lab.url is not None
        origin = lab.url.removesuffix("/v1")
        pids = set()
        for _ in range(16):  # a new connection each: the kernel spreads them over the replicas
            async with httpx.AsyncClient(base_url=origin) as fresh:
                pids.add((await fresh.get("/health")).json()["pid"])
        limits = httpx.Limits(max_connections=160)
        async with httpx.AsyncClient(base_url=origin, limits=limits) as client:
            responses = await asyncio.gather(*(send(client, key, chat_body(8, user=key)) for key in plan))
    assert len(pids) == 2
    assert all(r.status_code == 200 for r in responses)
    answers: dict[str, list[httpx.Response]] = collections.defaultdict(list)
    for key, response in zip(plan, responses, strict=True):
        answers[key].append(response)
    for key, group in answers.items():
        assert len({r.headers["x-request-id"] for r in group}) == 1 and len({r.content for r in group}) == 1, key
        executed = [r for r in group if "idempotent-replayed" not in r.headers]
        assert len(executed) == 1, key  # every other answer is a replay: the key ran once, on one of the replicas
