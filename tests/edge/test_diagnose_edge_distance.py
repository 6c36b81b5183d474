"""`diagnose` through a real nginx across a network path (20 ms each way by default; every path of
tests/support/distances.py with ``LATSCOPE_DISTANCE_MATRIX=full``; built by tests/support/netpath.py): each edge fault
→ its finding and nothing else above low, the tuned edge → nothing above low, as on loopback
(tests/edge/test_diagnose_edge.py), and each finding by a mechanism that holds at this distance.

What changes with the distance: nginx's ``tcp_nodelay off`` no longer waits for a delayed ACK at stream start (the
segment in flight is acknowledged as it fills), it sends one partial segment per round trip — the ACK clock the Nagle
check reads; a new connection costs the TCP and TLS handshakes' round trips on top of the host's work.
"""

from __future__ import annotations

import pytest

from latscope.diagnose import Diagnosis, diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.findings import Severity
from latscope.lab.edge.lab import EdgeLab
from latscope.wire.target import Target
from tests.diagnose.truth import TEST_COST
from tests.edge.support import needs_nginx
from tests.support.diagnosis import explain
from tests.support.distances import PATHS, Path
from tests.support.netpath import network_path

pytestmark = [needs_nginx, pytest.mark.timeout(180)]

#: As tests/edge/test_diagnose_edge.py.
over_each_path = pytest.mark.parametrize("path", PATHS, ids=str)
CONNECTION_IDS = ("no-connection-reuse", "tls-no-resumption", "http2-not-negotiated")


async def _diagnose(path: Path, *faults: str, only: tuple[str, ...] | None = None) -> Diagnosis:
    """A quick diagnosis, from the far end of ``path``, of the lab behind nginx with ``faults``."""
    with network_path(delay_ms=path.one_way_ms, rate_mbit=path.rate_mbit) as net:
        async with EdgeLab(faults=faults, cost=TEST_COST, host=net.server_host) as lab:
            result = await net.run(
                diagnose(
                    Target.resolve(lab.url, ca_file=str(lab.cert_path), timeouts=REQUEST_TIMEOUTS),
                    quick=True,
                    only=only,
                )
            )
    rtt = result.target["rtt_ms"]
    assert rtt is not None and rtt >= 2 * path.one_way_ms, result.target  # it was diagnosed at the distance it was put
    assert all(e.status == "ok" for e in result.experiments), explain(result)
    return result


def _above_low(result: Diagnosis) -> set[str]:
    return {f.id for f in result.findings if f.severity.rank > Severity.LOW.rank}


@over_each_path
async def test_the_tuned_edge_has_nothing_above_low_from_a_distance(path: Path) -> None:
    result = await _diagnose(path)
    assert _above_low(result) == set(), explain(result)
    assert {*CONNECTION_IDS, "stream-coalescing-nagle", "stream-proxy-buffering"} <= {c.id for c in result.clear}


@over_each_path
async def test_nagle_at_the_edge_is_named_by_its_ack_clock_from_a_distance(path: Path) -> None:
    result = await _diagnose(path, "nagle")
    assert _above_low(result) == {"stream-coalescing-nagle"}, explain(result)
    nagle = result.finding("stream-coalescing-nagle")
    assert nagle is not None
    clock = nagle.evidence["ack_clock"]
    # about one partial segment per round trip (over TLS a second partial read per round trip is common), while
    # nginx wrote a token several times per round trip
    assert clock["spacing_rtt_share"] >= 0.5 and clock["rtt_ms"] >= 3 * clock["token_interval_ms"], clock
    assert nagle.cost_ms >= 0.99 * clock["token_interval_ms"], nagle.evidence  # the first token came with later ones
    # and not taken for a buffer: the TTFT growth with max_tokens is within one of the clock's spacings
    assert result.finding("stream-proxy-buffering") is None, explain(result)


@over_each_path
async def test_proxy_buffering_without_http2_is_named_from_a_distance(path: Path) -> None:
    result = await _diagnose(path, "proxy-buffering", "no-h2")
    assert _above_low(result) == {"stream-proxy-buffering", "http2-not-negotiated"}, explain(result)
    buffering = result.finding("stream-proxy-buffering")
    assert buffering is not None and buffering.evidence["held_fraction"] > 0.5, buffering.evidence


@over_each_path
@pytest.mark.parametrize("fault", ["no-keepalive", "short-keepalive"])
async def test_a_closed_connection_costs_its_handshakes_round_trips(path: Path, fault: str) -> None:
    result = await _diagnose(path, fault, only=CONNECTION_IDS)
    assert _above_low(result) == {"no-connection-reuse"}, explain(result)
    reuse = result.finding("no-connection-reuse")
    assert reuse is not None
    # TCP's handshake and TLS 1.3's are a round trip each: a new connection costs about two, whatever the host adds
    assert reuse.cost_ms >= 1.5 * result.target["rtt_ms"], (reuse.cost_ms, result.target["rtt_ms"])


@over_each_path
async def test_tls_without_tickets_is_named_from_a_distance(path: Path) -> None:
    result = await _diagnose(path, "tls-no-tickets", only=CONNECTION_IDS)
    assert _above_low(result) == {"tls-no-resumption"}, explain(result)
