"""Idempotency keys in the lab's gateway, with the in-memory store: a key executes once, its duplicates and retries
get the original answer (same id, same bytes) marked as replayed, and the lab's records say which was which."""

from __future__ import annotations

import asyncio
import collections
import random

import httpx
import orjson
import pytest
from click.testing import CliRunner

from latscope.cli.lab import command as lab_command
from latscope.cli.lab import settings_from_options
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.errors import ErrorResponse
from latscope.lab.idempotency import Claimed, Idempotency, MemoryStore, Replay, open_store
from latscope.lab.idemstore import StoredAnswer, StoreUnavailableError
from latscope.lab.records import RequestRecord
from tests.lab.rawhttp import RawConnection, chat_body, exchange, post


def paced(step_ms: float) -> CostModel:
    """A token every ``step_ms``, prefill nearly free: a request's duration is known and short."""
    return CostModel.default().with_overrides(
        prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=step_ms, decode_per_seq_ms=0.0
    )


def answer(status: int = 200, body: bytes = b"{}", fingerprint: str = "f") -> StoredAnswer:
    return StoredAnswer(status, ((b"x-request-id", b"chatcmpl-1"),), body, False, "chatcmpl-1", fingerprint)


async def send(client: httpx.AsyncClient, key: str | None, body: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["idempotency-key"] = key
    return await client.post("/v1/chat/completions", content=body, headers=headers)


def streamed_tokens(body: bytes) -> int:
    """Chat chunks of a stream that carry text."""
    chunks = [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: {")]
    return sum(1 for c in chunks if c.get("choices") and c["choices"][0].get("delta", {}).get("content"))


def generation_records(lab: Lab) -> list[RequestRecord]:
    return [r for r in lab.records if r.endpoint is not None]


def by_key(records: list[RequestRecord]) -> dict[str | None, collections.Counter[str | None]]:
    outcomes: dict[str | None, collections.Counter[str | None]] = collections.defaultdict(collections.Counter)
    for record in records:
        outcomes[record.idempotency_key][record.idempotency] += 1
    return outcomes


# -- the in-memory store, on an injected clock ----------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_first_claim_wins_and_the_others_see_the_owner_until_it_finishes() -> None:
    store = MemoryStore()
    assert (await store.claim("k", "t1", "f", 60.0)).claimed
    second = await store.claim("k", "t2", "f", 60.0)
    assert not second.claimed and second.fingerprint == "f" and second.answer is None
    await store.complete("k", "t1", answer(), 60.0)
    third = await store.claim("k", "t3", "f", 60.0)
    assert not third.claimed and third.answer == answer()


async def test_a_released_key_is_claimed_again_and_only_its_owner_releases_it() -> None:
    store = MemoryStore()
    await store.claim("k", "t1", "f", 60.0)
    await store.release("k", "not-the-owner")
    assert not (await store.claim("k", "t2", "f", 60.0)).claimed
    await store.release("k", "t1")
    assert (await store.claim("k", "t2", "f", 60.0)).claimed


async def test_an_answer_is_kept_for_its_ttl_then_the_key_executes_again() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    await store.claim("k", "t1", "f", 5.0)
    clock.now += 4.0
    await store.complete("k", "t1", answer(), 10.0)  # the TTL counts from the answer
    clock.now += 9.9
    assert (await store.claim("k", "t2", "f", 5.0)).answer is not None
    clock.now += 0.2
    assert (await store.claim("k", "t2", "f", 5.0)).claimed


async def test_the_store_stays_bounded_dropping_the_oldest_finished_keys() -> None:
    store = MemoryStore(entries=3)
    for n in range(3):
        await store.claim(f"k{n}", "t", "f", 60.0)
    await store.complete("k1", "t", answer(), 60.0)
    assert (await store.claim("k3", "t", "f", 60.0)).claimed
    assert len(store) == 3
    assert (await store.claim("k1", "t", "f", 60.0)).claimed  # k1's answer was the one dropped


async def test_the_answers_bytes_stay_within_the_budget() -> None:
    store = MemoryStore(max_bytes=250)
    for n in range(3):
        await store.claim(f"k{n}", "t", "f", 60.0)
        await store.complete(f"k{n}", "t", answer(body=b"x" * 100), 60.0)
    assert store.answer_bytes == 200 and len(store) == 2
    assert (await store.claim("k0", "t", "f", 60.0)).claimed  # the oldest answer made room for the newest


async def test_a_duplicate_waits_for_the_running_original_then_replays_it() -> None:
    gate = Idempotency(MemoryStore(), wait_s=5.0)
    first = await gate.begin("scope", "k", "f")
    assert isinstance(first, Claimed)
    duplicate = asyncio.create_task(gate.begin("scope", "k", "f"))
    await asyncio.sleep(0.05)
    assert not duplicate.done()
    await gate.store.complete(first.key, first.token, answer(), 60.0)
    replayed = await asyncio.wait_for(duplicate, 1.0)
    assert isinstance(replayed, Replay) and replayed.answer == answer()


async def test_a_duplicate_gets_409_when_the_original_runs_past_the_wait() -> None:
    gate = Idempotency(MemoryStore(), wait_s=0.05)
    assert isinstance(await gate.begin("scope", "k", "f"), Claimed)
    with pytest.raises(ErrorResponse) as refused:
        await gate.begin("scope", "k", "f")
    assert refused.value.status == 409 and refused.value.code == "idempotency_key_in_use"
    assert (b"retry-after", b"1") in refused.value.headers


async def test_the_same_key_with_another_request_is_refused_with_422() -> None:
    gate = Idempotency(MemoryStore())
    await gate.begin("scope", "k", "f1")
    with pytest.raises(ErrorResponse) as refused:
        await gate.begin("scope", "k", "f2")
    assert refused.value.status == 422 and refused.value.code == "idempotency_key_reused"


async def test_keys_are_scoped_to_the_credential() -> None:
    gate = Idempotency(MemoryStore())
    assert isinstance(await gate.begin("alice", "k", "f"), Claimed)
    assert isinstance(await gate.begin("bob", "k", "f"), Claimed)


class BrokenStore(MemoryStore):
    async def claim(self, key: str, token: str, fingerprint: str, lease_s: float) -> object:  # type: ignore[override]
        raise StoreUnavailableError("connection refused")


async def test_an_unreachable_store_is_a_503_not_an_execution() -> None:
    with pytest.raises(ErrorResponse) as refused:
        await Idempotency(BrokenStore()).begin("scope", "k", "f")
    assert refused.value.status == 503 and refused.value.code == "idempotency_store_unavailable"


def test_a_stored_answer_survives_its_serialisation_and_garbage_is_refused() -> None:
    stored = StoredAnswer(
        200, ((b"x-request-id", b"chatcmpl-9"), (b"x", b"\xe9")), b"\x00data: {}\n\n", True, None, "f"
    )
    assert StoredAnswer.from_bytes(stored.to_bytes()) == stored
    for garbage in (b"", b"{}", b"[1]", b'{"status": "x"}'):
        with pytest.raises(StoreUnavailableError):
            StoredAnswer.from_bytes(garbage)


def test_a_store_is_memory_or_a_redis_url() -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    with pytest.raises(ValueError, match="unknown idempotency store"):
        open_store("postgres://db")


# -- through the lab ------------------------------------------------------------------------------------------------
async def test_concurrent_duplicates_execute_each_key_once_and_all_get_the_original_answer() -> None:
    keys = [f"retry-{n:02d}" for n in range(50)]
    bodies = {key: chat_body(8, stream=n % 2 == 0, user=key) for n, key in enumerate(keys)}
    plan = [keys[n % 50] for n in range(200)]
    random.Random(7).shuffle(plan)
    limits = httpx.Limits(max_connections=200)
    async with Lab(cost=paced(5.0)) as lab, httpx.AsyncClient(base_url=lab.origin, limits=limits) as client:
        responses = await asyncio.gather(*(send(client, key, bodies[key]) for key in plan))
        records = generation_records(lab)
    assert all(r.status_code == 200 for r in responses)
    answers: dict[str, list[httpx.Response]] = collections.defaultdict(list)
    for key, response in zip(plan, responses, strict=True):
        answers[key].append(response)
    for key, group in answers.items():
        assert len({r.headers["x-request-id"] for r in group}) == 1, key
        assert len({r.content for r in group}) == 1, key
        assert [r.headers.get("idempotent-replayed") for r in group].count("true") == 3, key
    assert by_key(records) == {key: collections.Counter(executed=1, replayed=3) for key in keys}
    executed = [r for r in records if r.idempotency == "executed"]
    assert {r.request_id for r in executed} == {group[0].headers["x-request-id"] for group in answers.values()}
    assert all(r.completion_tokens == 8 for r in executed)
    replays = [r for r in records if r.idempotency == "replayed"]
    assert all(r.prefill_ms is None and r.completion_tokens == 0 for r in replays)  # nothing generated for them
    assert any((r.idempotency_ms or 0.0) > 10.0 for r in replays)  # some arrived while the original ran, and waited


async def test_a_stream_cut_midway_finishes_and_its_retry_gets_the_original_answer() -> None:
    body = chat_body(40, stream=True)
    async with Lab(cost=paced(10.0)) as lab, httpx.AsyncClient(base_url=lab.origin) as client:
        conn = await RawConnection.open(lab.host, lab.port)
        conn.send(post("/v1/chat/completions", body, extra_headers=[("idempotency-key", "cut-1")]))
        assert await conn.wait_for(b'"content"', timeout=5.0, count=3)
        cut_head = conn.response.data.split(b"\r\n\r\n", 1)[0]
        conn.abort()
        retry = await send(client, "cut-1", body)
        records = generation_records(lab)
    request_id = next(line for line in cut_head.split(b"\r\n") if line.startswith(b"x-request-id:")).split(b": ")[1]
    assert retry.status_code == 200 and retry.headers["idempotent-replayed"] == "true"
    assert retry.headers["x-request-id"] == request_id.decode()
    assert streamed_tokens(retry.content) == 40 and retry.content.endswith(b"data: [DONE]\n\n")
    original, replayed = records
    assert (original.idempotency, original.cancelled, original.request_id) == ("executed", True, request_id.decode())
    assert (replayed.idempotency, replayed.request_id) == ("replayed", request_id.decode())


async def test_the_no_idempotency_fault_executes_duplicates_twice() -> None:
    keys = [f"dup-{n}" for n in range(10)]
    async with (
        Lab(faults=("no-idempotency",), cost=paced(5.0)) as lab,
        httpx.AsyncClient(base_url=lab.origin) as client,
    ):
        responses = await asyncio.gather(*(send(client, key, chat_body(4)) for key in keys for _ in range(2)))
        records = generation_records(lab)
    assert all(r.status_code == 200 and "idempotent-replayed" not in r.headers for r in responses)
    assert len({r.headers["x-request-id"] for r in responses}) == 20
    assert by_key(records) == {key: collections.Counter(ignored=2) for key in keys}
    assert all(r.completion_tokens == 4 for r in records)


async def test_requests_without_a_key_are_not_deduplicated_or_marked() -> None:
    async with Lab(cost=CostModel.zero()) as lab, httpx.AsyncClient(base_url=lab.origin) as client:
        first, second = [await send(client, None, chat_body(2)) for _ in range(2)]
        records = generation_records(lab)
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert [(r.idempotency_key, r.idempotency, r.idempotency_ms) for r in records] == [(None, None, None)] * 2


async def test_a_key_reused_with_another_body_gets_422_and_nothing_runs() -> None:
    async with Lab(cost=CostModel.zero()) as lab, httpx.AsyncClient(base_url=lab.origin) as client:
        first = await send(client, "k", chat_body(2))
        other = await send(client, "k", chat_body(3))
        records = generation_records(lab)
    assert first.status_code == 200
    assert other.status_code == 422 and other.json()["error"]["code"] == "idempotency_key_reused"
    assert [r.idempotency for r in records] == ["executed", "reused"] and records[1].prefill_ms is None


async def test_a_duplicate_of_a_long_request_gets_409_after_the_wait() -> None:
    async with (
        Lab(cost=paced(20.0), idempotency_wait_s=0.1) as lab,
        httpx.AsyncClient(base_url=lab.origin) as client,
    ):
        original = asyncio.create_task(send(client, "slow", chat_body(20)))
        await asyncio.sleep(0.05)
        duplicate = await send(client, "slow", chat_body(20))
        assert (await original).status_code == 200
        later = await send(client, "slow", chat_body(20))
        records = generation_records(lab)
    assert duplicate.status_code == 409 and duplicate.headers["retry-after"] == "1"
    assert duplicate.json()["error"]["code"] == "idempotency_key_in_use"
    assert later.status_code == 200 and later.headers["idempotent-replayed"] == "true"
    assert sorted(str(r.idempotency) for r in records) == ["executed", "in-use", "replayed"]
    in_use = next(r for r in records if r.idempotency == "in-use")
    assert in_use.idempotency_ms is not None and in_use.idempotency_ms >= 100.0


async def test_a_refused_request_leaves_its_key_free_for_the_retry() -> None:
    async with (
        Lab(cost=CostModel.zero(), rate_limit_requests_per_min=1) as lab,
        httpx.AsyncClient(base_url=lab.origin) as client,
    ):
        assert (await send(client, "a", chat_body(2))).status_code == 200
        refused = await send(client, "b", chat_body(2))
        store = lab.idempotency_store
        assert isinstance(store, MemoryStore)
        assert refused.status_code == 429 and len(store) == 1  # only "a" is kept: "b" executes when retried
        records = generation_records(lab)
    assert [r.idempotency for r in records] == ["executed", "executed"]


@pytest.mark.parametrize("value", ["x" * 256, "two words", "caf\u00e9", '""'])
async def test_an_unreadable_key_is_refused_with_400(value: str) -> None:
    async with Lab(cost=CostModel.zero()) as lab:
        raw = post("/v1/chat/completions", chat_body(2), extra_headers=[("idempotency-key", value)])
        response = await exchange(lab.host, lab.port, raw, until=b"}}")
    (head, body), *_ = response.responses()
    assert head.status_code == 400 and orjson.loads(body)["error"]["param"] == "Idempotency-Key"


async def test_a_quoted_key_is_the_same_key_as_the_bare_one() -> None:
    async with Lab(cost=CostModel.zero()) as lab, httpx.AsyncClient(base_url=lab.origin) as client:
        first = await send(client, '"abc-1"', chat_body(2))
        second = await send(client, "abc-1", chat_body(2))
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["x-request-id"] == first.headers["x-request-id"]


def test_the_lab_commands_flags_choose_the_store_its_ttl_and_wait() -> None:
    settings = settings_from_options(
        {"idempotency_store": "redis://127.0.0.1:6390/2", "idempotency_ttl_s": 60.0, "idempotency_wait_s": 2.0}
    )
    assert (settings.idempotency_store, settings.idempotency_ttl_s, settings.idempotency_wait_s) == (
        "redis://127.0.0.1:6390/2",
        60.0,
        2.0,
    )
    assert settings_from_options({}).idempotency_store == "memory"
    result = CliRunner().invoke(lab_command, ["--idempotency-store", "mongodb://x"])
    assert result.exit_code != 0 and "unknown idempotency store" in result.output


@pytest.mark.parametrize("extra", [["--tls"], ["--edge", "nginx"]])
def test_replicas_refuse_what_each_replica_cannot_do_alone(extra: list[str]) -> None:
    result = CliRunner().invoke(lab_command, ["--replicas", "2", *extra])
    assert result.exit_code == 2 and "--replicas" in result.output


async def test_every_api_replays_in_its_own_shape() -> None:
    body = orjson.dumps(
        {"model": "lab-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    headers = {"content-type": "application/json", "idempotency-key": "anthropic-1"}
    async with Lab(cost=CostModel.zero()) as lab, httpx.AsyncClient(base_url=lab.origin) as client:
        first, second = [await client.post("/v1/messages", content=body, headers=headers) for _ in range(2)]
    assert first.status_code == second.status_code == 200
    assert second.headers["idempotent-replayed"] == "true" and second.content == first.content
    assert second.headers["content-type"].startswith("text/event-stream") and b"event: message_stop" in second.content
