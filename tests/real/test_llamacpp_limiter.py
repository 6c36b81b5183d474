"""``gateway-queueing`` on a server that reports no queue time of its own, told by the line's pace: real nginx's
``limit_req`` in queue mode (the lab's ``gateway-queue`` edge: 10 requests/s, three beyond it at once, the rest
delayed to fit the rate) in front of llama-cpp-python (tiny random model), against llama-cpp-python alone, whose one
slot also makes a burst wait, one request's service time after another. The truth is nginx's own access log: what it
held each request of the burst before the origin's answer (``$request_time`` − ``$upstream_response_time``)."""

from __future__ import annotations

from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.diagnose.experiments import gateway
from latscope.findings import Clear
from latscope.lab.edge.config import EdgeConfig
from latscope.lab.edge.nginx import NginxEdge
from latscope.wire.target import Target
from tests.edge.support import needs_nginx
from tests.real.conftest import LlamaServer
from tests.support.diagnosis import explain

ID = "gateway-queueing"


def _burst_held_ms(access_log: str) -> list[float]:
    """What nginx held each request of the burst, ms: the experiment's last requests (the origin sends no request
    id to find them by), from its access log."""
    held = []
    for line in access_log.splitlines():
        if '"POST ' not in line:
            continue
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        held.append((float(fields["request_time"]) - float(fields["upstream_response"])) * 1000.0)
    return held[-gateway.HIGH_REQUESTS :]


@needs_nginx
async def test_a_limiter_queue_in_front_of_a_server_without_queue_times_is_named_by_its_pace(
    llama_server: LlamaServer,
) -> None:
    async with NginxEdge(llama_server.base_url, EdgeConfig.from_faults(["gateway-queue"], tls=True)) as edge:
        result = await diagnose(
            Target.resolve(edge.url, ca_file=str(edge.cert_path), timeouts=REQUEST_TIMEOUTS), quick=True, only=ID
        )
        path = edge.access_log_path
        access = path.read_text() if path is not None else ""
    finding = result.finding(ID)
    assert finding is not None, explain(result)
    assert finding.evidence["told_by"].startswith("pace"), finding.evidence
    held = _burst_held_ms(access)
    assert len(held) == gateway.HIGH_REQUESTS and sum(h > 50.0 for h in held) >= 2, held  # nginx did hold them
    real = sum(held) / len(held)
    # the cost includes what llama-cpp-python's one slot made the burst wait (the server reports no queue time)
    assert real <= finding.cost_ms <= 1.25 * real + finding.evidence["service_ms"] * gateway.HIGH_REQUESTS, (
        finding.cost_ms,
        held,
        finding.evidence,
    )


async def test_a_burst_that_waits_for_the_one_slot_alone_is_clear_by_its_pace(llama_server: LlamaServer) -> None:
    result = await diagnose(llama_server.base_url, quick=True, only=ID)
    outcome = result.outcome(ID)
    assert isinstance(outcome, Clear), explain(result)
    assert outcome.evidence["told_by"].startswith("pace"), outcome.evidence
