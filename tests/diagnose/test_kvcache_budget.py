"""The KV-cache burst at a GPU's decode pace: an engine that decodes streams together is sent its burst, budgeted as
streams that run at once, not as streams one after another."""

from __future__ import annotations

from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.diagnose.experiments.kvcache import BURST_BUDGET_S, CONCURRENCY, MAX_TOKENS_QUICK
from latscope.findings import NotTested
from latscope.wire.target import Target
from tests.support.load_sse_server import Script, ScriptedServer

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
