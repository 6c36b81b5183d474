"""Bench configuration: bounds, durations, warm-up, worker count, serialisation without secrets."""

from __future__ import annotations

import pytest

from latscope.load.arrivals import ClosedLoop, OpenLoop
from latscope.load.config import (
    DEFAULT_REQUESTS,
    BenchConfig,
    BenchConfigError,
    auto_workers,
    parse_duration_s,
    parse_warmup,
    split_evenly,
    target_is_local,
)
from latscope.load.slo import parse_slo
from latscope.load.workload import Workload, parse_class
from latscope.wire.target import Target, TargetError


def config(
    *, url: str = "http://127.0.0.1:8000/v1", headers: tuple[tuple[str, str], ...] = (), **kw: object
) -> BenchConfig:
    base: dict[str, object] = {
        "target": Target.resolve(url, headers=headers),
        "steps": (ClosedLoop(2),),
        "workload": Workload.single(),
    }
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


def test_durations_accept_units_and_bare_seconds() -> None:
    assert parse_duration_s("90") == 90.0
    assert parse_duration_s("2m") == 120.0
    assert parse_duration_s("500ms") == 0.5
    with pytest.raises(BenchConfigError):
        parse_duration_s("soon")


def test_warmup_is_requests_or_time() -> None:
    assert parse_warmup("20") == (20, 0.0)
    assert parse_warmup("5s") == (0, 5.0)


def test_without_bounds_a_step_has_the_default_request_count() -> None:
    assert config().measured_requests == DEFAULT_REQUESTS
    assert config(duration_s=10.0).measured_requests is None
    assert config(requests=7, duration_s=10.0).measured_requests == 7


@pytest.mark.parametrize(
    "kw",
    [{"steps": ()}, {"requests": 0}, {"duration_s": 0.0}, {"workers": 0}, {"warmup_s": -1.0}],
)
def test_inconsistent_configs_raise(kw: dict[str, object]) -> None:
    with pytest.raises(BenchConfigError):
        config(**kw)


def test_a_target_that_is_not_http_is_refused() -> None:
    with pytest.raises(TargetError, match="http:// or https://"):
        config(url="ftp://x")


def test_config_dict_round_trips_and_never_holds_the_api_key() -> None:
    c = config(
        steps=(ClosedLoop(1), OpenLoop(5.0, max_concurrency=3)),
        workload=Workload((parse_class("a:prompt=normal(10,2)"),), seed=4),
        slo=parse_slo("ttft=1s"),
        headers=(("Authorization", "Bearer sk-secret"), ("X-Team", "perf")),
        requests=10,
        warmup_s=2.0,
    )
    data = c.to_dict()
    assert "sk-secret" not in str(data)
    assert data["target"]["headers"]["x-team"] == "perf"
    back = BenchConfig.from_dict(data, headers=c.target.headers)
    assert back == c


def test_split_evenly_hands_out_the_remainder_first() -> None:
    assert [split_evenly(10, w, 3) for w in range(3)] == [4, 3, 3]
    assert sum(split_evenly(10_001, w, 7) for w in range(7)) == 10_001


def test_auto_workers_uses_one_worker_for_light_loads_and_leaves_a_core_for_a_local_target() -> None:
    local, remote = "http://127.0.0.1:1/v1", "https://api.example.com/v1"
    assert target_is_local(local) and target_is_local("http://localhost:1") and not target_is_local(remote)
    assert auto_workers(ClosedLoop(8), remote, cores=8) == 1
    assert auto_workers(ClosedLoop(10_000), remote, cores=8) == 4
    assert auto_workers(ClosedLoop(10_000), local, cores=2) == 1
    assert auto_workers(OpenLoop(5000.0), remote, cores=2) == 2
    assert auto_workers(OpenLoop(5000.0), local, cores=4) == 3


def test_the_retry_settings_round_trip_and_make_the_clients_policy() -> None:
    c = config(retries=3, retry_backoff_s=0.2, retry_max_wait_s=30.0, idempotency_keys=True)
    assert BenchConfig.from_dict(c.to_dict()) == c
    policy = c.retry_policy
    assert (policy.retries, policy.backoff_s, policy.max_wait_s, policy.idempotency_keys) == (3, 0.2, 30.0, True)
    # a run saved before retries reads as one that never retried
    old = {k: v for k, v in c.to_dict().items() if "retr" not in k and k != "idempotency_keys"}
    assert BenchConfig.from_dict(old).retries == 0


def test_a_negative_retry_count_is_refused() -> None:
    with pytest.raises(BenchConfigError, match="--retries"):
        config(retries=-1)
