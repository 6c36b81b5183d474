"""`diagnose` against llama.cpp (llama-cpp-python, tiny random model) across a network path: 20 ms each way by
default, every path of tests/support/distances.py with ``LATSCOPE_DISTANCE_MATRIX=full`` (tests/support/netpath.py
builds them). The diagnosis must be the one it gets on loopback (tests/real/test_llamacpp_diagnose.py) — head-of-line
queueing in its single model slot, a capacity of one request, host-side sampling, and nothing else — although every
request now pays a round trip as large as the server's own work.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path as FilePath

import pytest

from latscope.diagnose import diagnose
from latscope.findings import Clear, Inconclusive, Severity
from tests.real.conftest import require_llama_python, running_llama_server
from tests.real.llama_sampling import sampling_here_now
from tests.support.diagnosis import explain
from tests.support.distances import PATHS, Path
from tests.support.netpath import network_path

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("path", PATHS, ids=str)
async def test_llamacpp_is_diagnosed_alike_across_a_network_path(path: Path, tmp_path: FilePath) -> None:
    python = require_llama_python()
    with (
        network_path(delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net,
        running_llama_server(python, tmp_path, host=net.server_host) as server,
    ):
        result = await net.run(diagnose(server.base_url, quick=True))
        log = server.log_tail()
        here = await asyncio.to_thread(sampling_here_now, server)  # from this side of the path: the server's own
    rtt = result.target["rtt_ms"]
    assert rtt is not None and rtt >= 2 * path.one_way_ms, result.target
    assert all(e.status == "ok" for e in result.experiments), explain(result) + "\n" + log
    above_low = {f.id for f in result.findings if f.severity.rank > Severity.LOW.rank}
    # host-side sampling is found at every distance, but its few ms per stream sit near the low/medium line next to a
    # TTFT that now carries a round trip: its severity is not part of the diagnosis being compared
    assert above_low - {"decode-host-overhead"} == {"queue-head-of-line", "capacity-saturation"}, explain(result)
    sampling = result.finding("decode-host-overhead")
    if here.free:  # this build on this host samples for nothing (timed without latscope, tests/real/llama_sampling.py)
        assert sampling is None, (here, explain(result))
    elif here.costs or sampling is not None:
        assert sampling is not None, (here, explain(result))
        assert sampling.evidence["sampled_tpot_ms"] > sampling.evidence["greedy_tpot_ms"], sampling.evidence
    saturation = result.finding("capacity-saturation")
    assert saturation is not None, explain(result)
    assert saturation.evidence["capacity"] == 1, json.dumps(saturation.evidence)
    queue = result.finding("queue-head-of-line")
    assert queue is not None and queue.evidence["inflation_in_long_prefills"] >= 1.75, queue.evidence
    clear = {o.id for o in result.clear}
    assert "no-connection-reuse" in clear, explain(result)
    # llama-server sets TCP_NODELAY: never a Nagle finding. A quick run's two delayed-ACK streams can leave it
    # undecided here, though: holds of 1.7-3.7 ms against a 2.1-2.5 ms threshold (this tiny model writes a token
    # every 1.3 ms), one stream of two past it; that is an honest "more samples would settle it", not a finding
    nagle = result.outcome("stream-coalescing-nagle")
    assert isinstance(nagle, Clear | Inconclusive), explain(result)
