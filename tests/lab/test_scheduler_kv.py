"""KV-cache exhaustion preempts the most recently admitted sequence, which recomputes and still completes."""

from __future__ import annotations

import asyncio

from latscope.lab.batchlog import BatchLog
from latscope.lab.costmodel import CostModel
from latscope.lab.engine import EngineCore, Policy, Step, TokenOut, simulate
from latscope.lab.metrics import LabMetrics
from latscope.lab.scheduler import GenerationRequest, RequestStream, Scheduler, SchedulerConfig

# 40 blocks of 16 tokens = 640 tokens of KV; each request below needs 64 + 64 = 128 tokens (8 blocks) by its end,
# six of them need 48 blocks: the cache runs out mid-decode.
TIGHT = CostModel(
    prefill_base_ms=0.0,
    prefill_per_token_ms=0.001,
    prefill_quadratic_ms=0.0,
    decode_base_ms=0.05,
    decode_per_seq_ms=0.0,
    kv_blocks=40,
    max_batch=16,
    chunk_tokens=512,
)


class ListSink:
    def __init__(self) -> None:
        self.tokens: list[TokenOut] = []
        self.closed: list[str | None] = []

    def push(self, token: TokenOut) -> None:
        self.tokens.append(token)

    def close(self, error: str | None) -> None:
        self.closed.append(error)


def test_exhaustion_preempts_and_everything_still_completes() -> None:
    for policy in Policy:
        sinks: dict[str, ListSink] = {}
        core = EngineCore(policy, TIGHT, record_events=True)
        arrivals = [(i, GenerationRequest(f"r{i}", 64, 64)) for i in range(6)]

        def sink_for(request: GenerationRequest, sinks: dict[str, ListSink] = sinks) -> ListSink:
            return sinks.setdefault(request.request_id, ListSink())

        stats = simulate(core, arrivals, sink_for=sink_for)
        assert core.counters.preemptions > 0, policy
        assert sum(s.preemptions for s in stats) == core.counters.preemptions
        for request_stats in stats:
            sink = sinks[request_stats.request_id]
            assert [t.index for t in sink.tokens] == list(range(64))  # nothing repeated, nothing lost
            assert sink.closed == [None]
            assert request_stats.completion_tokens == 64
        assert (core.running, core.waiting, core.kv_blocks_used) == (0, 0, 0)


def test_the_most_recently_admitted_sequence_is_the_victim() -> None:
    core = EngineCore(Policy.FIFO, TIGHT)
    arrivals = [(i, GenerationRequest(f"r{i}", 64, 64)) for i in range(6)]
    stats = simulate(core, arrivals)
    # The first admitted is never preempted: the later ones make room for it.
    assert stats[0].preemptions == 0
    assert max(s.preemptions for s in stats[1:]) > 0


def test_a_preempted_sequence_recomputes_its_prompt_and_generated_tokens() -> None:
    core = EngineCore(Policy.PRIORITY, TIGHT)
    recomputed: list[tuple[int, int, int]] = []  # (prefill target, prompt, generated) of readmitted sequences
    original_plan = core.plan

    def plan_and_watch(now_ns: int) -> Step | None:
        step = original_plan(now_ns)
        if step is not None:
            for seq, _ in step.chunks:
                if seq.stats.preemptions and seq.prefilled == 0:
                    recomputed.append((seq.prefill_target, seq.prompt_tokens, seq.generated))
        return step

    core.plan = plan_and_watch  # type: ignore[method-assign]
    simulate(core, [(i, GenerationRequest(f"r{i}", 64, 64)) for i in range(6)])
    assert recomputed
    assert all(target == prompt + generated for target, prompt, generated in recomputed)
    assert any(generated > 0 for _, _, generated in recomputed)


async def test_preemption_in_real_time_is_counted_and_leaves_the_cache_empty() -> None:
    metrics = LabMetrics(names="vllm")
    log = BatchLog()
    scheduler = Scheduler(SchedulerConfig(cost=TIGHT), metrics=metrics, batch_log=log)
    await scheduler.start()
    try:
        streams = [scheduler.submit(GenerationRequest(f"r{i}", 64, 64)) for i in range(6)]
        results = await asyncio.gather(*(_indices(s) for s in streams))
    finally:
        await scheduler.stop()
    assert results == [list(range(64))] * 6
    preemptions = sum(s.stats.preemptions for s in streams)
    assert preemptions > 0
    assert metrics.registry.get_sample_value("vllm:num_preemptions_total", {"model_name": "lab-model"}) == preemptions
    assert len(log.of_stage("preempt")) == preemptions
    assert scheduler.kv_usage == 0.0
    assert metrics.registry.get_sample_value("vllm:kv_cache_usage_perc", {"model_name": "lab-model"}) == 0.0


async def _indices(stream: RequestStream) -> list[int]:
    return [token.index async for token in stream]
