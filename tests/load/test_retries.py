"""``bench --retries`` end to end: against the lab's rate limiter (its records are the truth) and a scripted server."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.load.arrivals import ClosedLoop, InterArrival, OpenLoop
from latscope.load.bench import bench_async
from latscope.load.config import BenchConfig
from latscope.load.lengths import LengthDist
from latscope.load.workload import Workload
from latscope.wire import Timeouts
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ScriptedServer

pytestmark = pytest.mark.timeout(90)

#: The lab's limiter: 10 requests per second after a burst of 2, so back-to-back requests are refused ~100 ms apart.
RATE_PER_MIN = 600
BURST = 2
REQUESTS = 10


def config(url: str, **kw: object) -> BenchConfig:
    base: dict[str, object] = {
        "target": Target.resolve(url, timeouts=Timeouts(headers_s=10.0, read_s=10.0)),
        "steps": (ClosedLoop(1),),
        "workload": Workload.single(LengthDist.fixed(8), LengthDist.fixed(4)),
        "requests": REQUESTS,
        "server_metrics": False,  # the metrics sampler's GET would spend the limiter's quota too
    }
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def _rate_limited_lab() -> Lab:
    return Lab(
        faults=("rate-limit",),
        cost=CostModel.zero(),
        rate_limit_requests_per_min=RATE_PER_MIN,
        rate_limit_burst=BURST,
    )


async def test_retries_against_the_labs_rate_limit_wait_for_retry_after_and_are_counted_as_the_lab_saw_them(
    tmp_path: Path,
) -> None:
    async with _rate_limited_lab() as lab:
        result = await bench_async(config(lab.url, retries=8, retry_backoff_s=0.02), tmp_path / "retries")
        records = [r for r in lab.records if r.endpoint is not None]
    requests = pd.read_parquet(tmp_path / "retries" / "requests.parquet").sort_values("request_id")
    [step] = result.steps
    refused = [r for r in records if r.status == 429]
    served = [r for r in records if r.status == 200]

    # every attempt reached the lab, and nothing else did
    assert int(requests.attempts.sum()) == len(records) == step.overall.attempts
    assert int((requests.attempts - 1).sum()) == len(refused) > 0
    # goodput counts logical requests: each one the lab answered once
    assert step.overall.requests == REQUESTS and step.overall.ok == len(served) == REQUESTS
    assert step.overall.retried == int((requests.attempts > 1).sum())

    # no retry before the Retry-After the lab sent: one user, so the lab's records are the attempts in order
    for before, after in itertools.pairwise(records):
        if before.status == 429:
            assert before.retry_after_ms is not None
            sent_ns = before.headers_sent_ns or before.finished_ns
            assert after.started_ns >= sent_ns + before.retry_after_ms * 1e6

    # the time in retries, per logical request, is what the lab saw between a request's first and last attempt
    lab_retry_ms = []
    it = iter(records)
    for n in requests.attempts:
        attempts = [next(it) for _ in range(int(n))]
        lab_retry_ms.append((attempts[-1].started_ns - attempts[0].started_ns) / 1e6)
    client_total, lab_total = float(requests.retry_ms.sum()), float(sum(lab_retry_ms))
    assert 0.9 < client_total / lab_total < 1.1
    assert step.overall.retry_time_ms == pytest.approx(client_total)
    # the retried requests' times to the first token include their retries
    retried = requests[requests.attempts > 1]
    assert (retried.ttft_ms >= retried.retry_ms).all()

    # the earlier attempts are in the row, each a 429 with the lab's Retry-After and the wait after it
    earlier = [a for row in requests.retried for a in row]
    assert len(earlier) == len(refused)
    assert all(a["status"] == 429 and a["error_kind"] == "http-status" for a in earlier)
    assert all(a["wait_ms"] >= a["retry_after_ms"] for a in earlier)
    assert requests.retry_wait_ms.sum() <= requests.retry_ms.sum()

    # the check: most of the users' time went into waiting for the limiter, and no retry carried a key
    [check] = result.data["steps"][0]["checks"]
    assert check["id"] == "retry-amplification" and "severity" in check
    assert check["evidence"]["retries_without_idempotency_key"] == len(refused)
    assert check["evidence"]["attempts"] == len(records)


async def test_without_retries_the_refused_requests_fail_and_retry_amplification_is_not_tested(
    tmp_path: Path,
) -> None:
    async with _rate_limited_lab() as lab:
        result = await bench_async(config(lab.url), tmp_path)
        records = [r for r in lab.records if r.endpoint is not None]
    [step] = result.steps
    assert len(records) == REQUESTS and step.overall.attempts == REQUESTS
    assert step.overall.errors == sum(1 for r in records if r.status == 429) > 0
    [check] = result.data["steps"][0]["checks"]
    assert check["id"] == "retry-amplification" and "reason" in check and "evidence" not in check  # not tested


async def test_with_idempotency_keys_every_logical_request_has_one_and_its_retries_share_it(tmp_path: Path) -> None:
    script = Script(status=lambda n: 503 if n % 3 == 0 else None)
    async with ScriptedServer(script) as server:
        result = await bench_async(
            config(server.url, retries=2, retry_backoff_s=0.0, idempotency_keys=True, requests=6), tmp_path
        )
        seen = [headers.get("idempotency-key") for _, headers in server.seen]
    requests = pd.read_parquet(tmp_path / "requests.parquet").sort_values("request_id")
    assert requests.ok.all() and requests.idempotency_key.notna().all()
    assert requests.idempotency_key.nunique() == 6
    # the server saw each request's key once per attempt
    for key, attempts in zip(requests.idempotency_key, requests.attempts, strict=True):
        assert seen.count(key) == attempts
    check = result.data["steps"][0]["checks"][0]
    assert check["evidence"]["retries_without_idempotency_key"] == 0


async def test_an_open_loop_retry_does_not_move_the_next_arrival(tmp_path: Path) -> None:
    # the first request is refused for 300 ms; the schedule's next arrivals (every 50 ms) go out on time meanwhile
    script = Script(status=lambda n: 429 if n == 0 else None, error_headers=lambda n: {"retry-after-ms": "300"})
    steps = (OpenLoop(20.0, InterArrival.CONSTANT),)
    async with ScriptedServer(script) as server:
        await bench_async(config(server.url, steps=steps, retries=1, requests=8), tmp_path)
    requests = pd.read_parquet(tmp_path / "requests.parquet").sort_values("request_id")
    assert requests.attempts.tolist() == [2] + [1] * 7
    first = requests.iloc[0]
    assert first.retry_ms >= 300.0 and first.client_queue_ms < 50.0
    others = requests.iloc[1:]
    # the others started when scheduled, not after the retried one; as close to schedule as a request never retried
    assert float(np.median(others.client_queue_ms)) < 50.0
    assert (others.started_at_ms < first.started_at_ms + first.retry_ms).sum() >= 5


#: A stream of 48 tokens at 8 ms a step (~0.4 s), cut by the client after 0.2 s: every first attempt has begun
#: streaming (its response id and some tokens came) when it fails, so a keyed retry goes again.
STREAM_COST = CostModel.zero().with_overrides(decode_base_ms=8.0)
CUT_AFTER_S = 0.2


def _cut_config(url: str) -> BenchConfig:
    return config(
        url,
        workload=Workload.single(LengthDist.fixed(8), LengthDist.fixed(48)),
        requests=2,
        retries=6,
        retry_backoff_s=0.05,
        idempotency_keys=True,
        target=Target.resolve(url, timeouts=Timeouts(headers_s=10.0, read_s=10.0, total_s=CUT_AFTER_S)),
    )


@pytest.mark.parametrize("honoured", [True, False], ids=["keys-honoured", "no-idempotency"])
async def test_keyed_retries_of_cut_streams_are_replayed_or_caught_executing_again(
    tmp_path: Path, honoured: bool
) -> None:
    faults = () if honoured else ("no-idempotency",)
    async with Lab(faults=faults, cost=STREAM_COST) as lab:
        result = await bench_async(_cut_config(lab.url), tmp_path)
        records = [r for r in lab.records if r.endpoint is not None and r.idempotency_key is not None]
    requests = pd.read_parquet(tmp_path / "requests.parquet")
    # the truth: how many times the lab generated each key's request
    generated = {key: sum(1 for r in records if r.idempotency_key == key and r.idempotency != "replayed")
                 for key in requests.idempotency_key}  # fmt: skip
    assert all(requests.attempts > 1), requests.attempts  # every first attempt was cut and retried
    [step] = result.steps
    [check] = result.data["steps"][0]["checks"]
    if honoured:
        # the key held: each request ran once, and the retry that ended it got the first response back (its id)
        assert set(generated.values()) == {1}, generated
        assert requests.ok.all() and step.overall.executed_again == 0
        assert check["evidence"]["keyed_requests_executed_again"] == 0
        assert "generated again" not in check.get("rule", "")
    else:
        # the lab ignored the key: every attempt generated anew, under a new id, and the client caught it
        assert all(n > 1 for n in generated.values()), generated
        assert step.overall.executed_again == len(generated)
        assert check["severity"] == "high" and "generated again" in check["rule"]
