"""The fault matrix across a real network path: the client in a network namespace tens of milliseconds away from
the lab (tests/support/netpath.py: every packet delayed by a userspace relay, so TCP runs end to end), optionally
behind a bandwidth limit. Each fault must still give its finding (medium or high) and nothing else above low, with its
cost within ±25 % of the ground truth measured over the same path; the tuned lab nothing above low.

Every case runs at every distance with ``LATSCOPE_DISTANCE_MATRIX=full`` (about 25 minutes; ``benchmarks/
distance_matrix.py`` prints the same as a table). By default a bounded subset runs (a few minutes): at 20 ms the
tuned lab, the naive one (four faults at once) and the faults it lacks; at 50 ms and at 20 ms behind 20 Mbit/s the
tuned and naive labs. The cases are in tests/diagnose/distance_cases.py.
"""

from __future__ import annotations

import pytest

from tests.diagnose.distance_cases import RUN, Case, run_case
from tests.support.diagnosis import explain
from tests.support.distances import Path
from tests.support.netpath import network_path

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize(("path", "case"), RUN, ids=[f"{p}-{c.name}" for p, c in RUN])
async def test_each_fault_is_named_alone_with_its_cost_across_a_network_path(path: Path, case: Case) -> None:
    with network_path(delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net:
        run = await run_case(net, case)
    assert set(run.above_low()) == case.expected, explain(run.result)
    rtt = run.result.target["rtt_ms"]
    assert rtt is not None and rtt >= 2 * path.one_way_ms  # the diagnosis saw the distance it was put at
    assert run.cost_within_tolerance(case), (run.cost_ms(case), run.truth_ms, explain(run.result))
    upload = run.result.target.get("upload_mbit_s")
    if path.rate_mbit is not None and "parsing" in {e.name for e in run.result.experiments}:
        # the upload rate the report shows is the link's (the kernel's delivery rate after the largest bodies)
        assert upload is not None and 0.7 * path.rate_mbit <= upload <= 1.1 * path.rate_mbit, run.result.target
