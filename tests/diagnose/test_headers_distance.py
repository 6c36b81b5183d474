"""``request-header-bloat`` across a 40 ms round trip (the client 20 ms each way from the lab,
tests/support/netpath.py): a head past TCP's initial congestion window (RFC 6928: ten segments, about 14 KB) waits a
round trip more on a new connection, so the new connections' line is the steeper one; a lean client is still clear,
priced on the reused connections it sends on."""

from __future__ import annotations

import pytest

from latscope.diagnose import diagnose
from latscope.findings import Clear
from latscope.lab.app import Lab
from tests.diagnose.truth import TEST_COST
from tests.support.netpath import network_path

pytestmark = pytest.mark.timeout(120)

ONE_WAY_MS = 20.0


async def test_a_head_past_the_initial_window_costs_a_new_connection_a_round_trip() -> None:
    with network_path(delay_ms=ONE_WAY_MS) as net:
        async with Lab(cost=TEST_COST, host=net.server_host) as lab:
            result = await net.run(diagnose(lab.url, quick=True, only="request-header-bloat"))
    outcome = result.outcome("request-header-bloat")
    assert isinstance(outcome, Clear) and outcome.evidence["priced_on"] == "reused connections", outcome
    fresh = outcome.evidence["new_connections"]
    reused = outcome.evidence["reused_connections"]
    # 24 KB of padding is past the initial window, 12 KB is not: the step is a round trip
    waits = fresh["wait_ms_by_pad_kb"]
    assert waits["24"] - waits["12"] >= 0.75 * 2 * ONE_WAY_MS, fresh
    assert fresh["ms_per_kb"] > reused["ms_per_kb"], (fresh, reused)
