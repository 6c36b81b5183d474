"""``response-cached`` and ``trace-context-dropped`` across a 40 ms round trip (the client 20 ms each way from the
lab, tests/support/netpath.py): the silent cache is still told from generation by timing alone, since the round trip
adds the same to the repeat and the control; the tuned lab stays clear. An engine whose first token comes within a
millisecond (GPU-fast prefill of a short prompt) leaves nothing to compare after the round trip is subtracted: the
replay is then told by its missing decode cadence."""

from __future__ import annotations

import pytest

from latscope.diagnose import diagnose
from latscope.findings import Clear, Finding
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from tests.diagnose.truth import TEST_COST
from tests.support.netpath import network_path

pytestmark = pytest.mark.timeout(120)

ONE_WAY_MS = 20.0


#: A prefill of a short prompt well under a millisecond: what a GPU does, what the round trip's jitter hides.
FAST_PREFILL = TEST_COST.with_overrides(prefill_base_ms=0.1, prefill_per_token_ms=0.0, prefill_quadratic_ms=0.0)


@pytest.mark.parametrize("cost", [TEST_COST, FAST_PREFILL], ids=["lab-cost", "fast-prefill"])
@pytest.mark.parametrize(
    ("faults", "cached"), [([], False), (["silent-response-cache"], True)], ids=["tuned", "silent"]
)
async def test_a_replay_is_told_from_generation_across_a_40_ms_round_trip(
    cost: CostModel, faults: list[str], cached: bool
) -> None:
    with network_path(delay_ms=ONE_WAY_MS) as net:
        async with Lab(cost=cost, faults=faults, host=net.server_host) as lab:
            result = await net.run(diagnose(lab.url, quick=True, only="response-cached"))
            hits, replayed = lab.cache_hits, lab.cache_responses_replayed
    outcome = result.outcome("response-cached")
    if cached:
        assert isinstance(outcome, Finding) and hits >= 1 and replayed == 1, outcome
        assert outcome.evidence["rtt_ms"] >= 2 * ONE_WAY_MS  # the distance was there and subtracted
    else:
        assert isinstance(outcome, Clear) and hits == 0, outcome


async def test_dropped_trace_context_is_found_across_a_network_path() -> None:
    with network_path(delay_ms=ONE_WAY_MS) as net:
        async with Lab(cost=TEST_COST, faults=["drop-trace-context"], host=net.server_host) as lab:
            result = await net.run(diagnose(lab.url, quick=True, only="trace-context-dropped"))
    assert isinstance(result.outcome("trace-context-dropped"), Finding)
