"""The engine checks against llama.cpp's own ``llama-server`` (continuous batching, ``--parallel`` slots,
``--metrics``), serving the tiny random model: what the concurrency sweep finds is what the server's slots are.

With 2 slots, a third and fourth request at once wait for a slot: ``capacity-saturation`` at a capacity of 2,
confirmed by the server's own ``requests_deferred`` gauge. With 16 slots the sweep's 16 requests all start at once:
no finding. Nothing here depends on how fast this machine decodes: a request waited when its first token came a
prefill and half a stream after its burst's first ones, which slots decide.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.diagnose import diagnose
from latscope.findings import Clear, Finding
from tests.real.native_server import llama_server_binary, running_native_server
from tests.support.diagnosis import explain

pytestmark = pytest.mark.timeout(240)


async def test_requests_beyond_the_slots_wait_and_the_metrics_confirm_it(tmp_path: Path) -> None:
    binary = llama_server_binary()
    with running_native_server(binary, tmp_path, parallel=2) as server:
        result = await diagnose(server.base_url, quick=True, only="capacity-saturation")
        log = server.log_tail()
    outcome = result.outcome("capacity-saturation")
    assert isinstance(outcome, Finding), explain(result) + "\n" + log
    evidence = outcome.evidence
    assert evidence["capacity"] == 2 and evidence["waited_at"] == 4, evidence
    assert evidence["metrics"].startswith("llamacpp metrics"), evidence
    assert evidence["waiting_gauge_max"] and evidence["waiting_gauge_max"] >= 1, evidence  # requests_deferred
    assert evidence["running_gauge_max"] == 2, evidence  # requests_processing: the two slots
    assert len(evidence["batch_series"]) >= 3, evidence  # the batch size over the sweep, for the heatmap


async def test_no_engine_finding_while_the_sweep_stays_within_the_slots(tmp_path: Path) -> None:
    binary = llama_server_binary()
    with running_native_server(binary, tmp_path, parallel=16) as server:
        result = await diagnose(server.base_url, quick=True, only="capacity-saturation,batching-window")
        log = server.log_tail()
    saturation = result.outcome("capacity-saturation")
    assert isinstance(saturation, Clear), explain(result) + "\n" + log
    assert isinstance(result.outcome("batching-window"), Clear), explain(result)
