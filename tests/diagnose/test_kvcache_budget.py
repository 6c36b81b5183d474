"""The KV-cache burst at a GPU's decode pace: an engine that decodes streams together is sent its burst, budgeted as
streams that run at once, not as streams one after another; one that serves a stream at a time is sent as many as
fit in the budget."""

from __future__ import annotations

import asyncio

import pytest

from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.diagnose.experiments import kvcache
from latscope.diagnose.experiments.kvcache import BURST_BUDGET_S, CONCURRENCY, MAX_TOKENS_QUICK
from latscope.findings import NotTested
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ScriptedServer
from tests.support.stream_server import Received, Reply, StreamServer, models_handler, paced_stream

#: A GPU's decode pace, s per token: one quick stream takes about 1.9 s, so eight one after another take over the
#: experiment's budget and eight decoded together do not.
GAP_S = 0.015
ID = "kv-cache-pressure"


def _largest_burst(arrivals_ns: list[int], window_s: float = 0.5) -> int:
    """The most generation requests that arrived within ``window_s`` of each other (the server's own record)."""
    times = sorted(arrivals_ns)
    return max(sum(1 for u in times if 0 <= u - t <= window_s * 1e9) for t in times)


async def test_an_engine_that_decodes_streams_together_is_sent_the_burst_at_a_gpus_pace() -> None:
    assert CONCURRENCY * MAX_TOKENS_QUICK * GAP_S > BURST_BUDGET_S  # eight one after another would be over budget
    async with ScriptedServer(Script(gap_s=GAP_S)) as server:  # every stream at its own pace: decoded together
        target = Target.resolve(server.url, timeouts=REQUEST_TIMEOUTS)
        result = await diagnose(target, model="m", quick=True, only=ID)
        arrivals = [at for at, _ in server.seen]
    outcome = result.outcome(ID)
    assert outcome is not None and not (isinstance(outcome, NotTested) and "not sent" in outcome.reason), outcome
    assert _largest_burst(arrivals) >= CONCURRENCY  # the server saw the burst arrive at once


async def test_a_server_that_serves_one_stream_at_a_time_is_sent_as_many_as_fit_in_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one slot (a lock), 3 ms a token: a quick stream takes about 0.4 s; a 2 s budget fits four or so, not eight
    monkeypatch.setattr(kvcache, "BURST_BUDGET_S", 2.0)
    slot = asyncio.Lock()
    served: list[int] = []

    async def one_at_a_time(request: Received, reply: Reply) -> None:
        async with slot:
            served.append(len(served))
            await paced_stream(kvcache.MAX_TOKENS_QUICK, 0.003)(request, reply)

    async with StreamServer(models_handler(one_at_a_time)) as server:
        result = await diagnose(server.base_url, quick=True, only=ID, keep_timelines=True)
    outcome = result.outcome(ID)
    assert outcome is not None and not (isinstance(outcome, NotTested) and "not sent" in outcome.reason), outcome
    burst = [t for t in result.timelines if (t.label or "").endswith("at once")]
    assert kvcache.MIN_BURST <= len(burst) < CONCURRENCY, [t.label for t in burst]
    assert all(t.label is not None and t.label.endswith(f"/{len(burst)} at once") for t in burst)
