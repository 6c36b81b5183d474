"""The experiment registry: every check's family has an experiment, and the plan follows the registry."""

from __future__ import annotations

from latscope.checks import CHECKS
from latscope.checks.connection import ConnectionEvidence
from latscope.diagnose import diagnose, plan
from latscope.diagnose.context import Context
from latscope.diagnose.experiments import EXPERIMENTS, Experiment, Prior, register_experiment
from latscope.findings import NotTested
from tests.support.stream_server import StreamServer, models_handler, paced_stream


def test_every_check_reads_a_family_some_experiment_produces() -> None:
    assert {check.family for check in CHECKS.values()} <= set(EXPERIMENTS)


def test_experiments_run_in_request_path_order() -> None:
    assert tuple(EXPERIMENTS) == (
        "connection",
        "caching",
        "tracecontext",
        "headers",
        "parsing",
        "multimodal",
        "queueing",
        "batching",
        "prefill",
        "prefixcache",
        "saturation",
        "kvcache",
        "sampling",
        "streaming",
        "gateway",  # after the others: its pause lets a bucket they drained refill
        "overhead",  # with --direct only: the gateway and its upstream, in pairs
        "ratelimit",  # last, off path order: it reads the refusals every other experiment met
    )
    assert plan.families_for(CHECKS) == tuple(EXPERIMENTS)


def test_only_the_queueing_and_prefill_experiments_ask_for_the_prompt_length_sweep() -> None:
    assert [e.family for e in EXPERIMENTS.values() if e.needs_sweep] == ["queueing", "prefill"]


async def test_a_registered_experiment_replaces_the_family_without_touching_the_runner() -> None:
    calls: list[tuple[str, int]] = []

    async def stand_in(ctx: Context, prior: Prior) -> ConnectionEvidence:
        calls.append((ctx.model, prior.typical_max_tokens))
        return ConnectionEvidence(tls=False, sequential=())  # nothing measured

    original = EXPERIMENTS["connection"]
    register_experiment(Experiment("connection", "a stand-in", lambda ctx: 1, stand_in))
    try:
        async with StreamServer(models_handler(paced_stream(2))) as server:
            result = await diagnose(server.base_url, only="no-connection-reuse", quick=True)
    finally:
        register_experiment(original)
    assert calls == [("test-model", 16)]  # run once, with the baseline's typical length (quick: 16 tokens)
    outcome = result.outcome("no-connection-reuse")
    assert isinstance(outcome, NotTested) and "fewer than two sequential requests" in outcome.reason
    assert [run.name for run in result.experiments] == ["baseline", "connection"]
