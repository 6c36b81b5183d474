"""The lab's converting gateway hop (``gateway-overhead``): a real proxy stage in front of an upstream lab that also
serves directly, spending its per-request and per-chunk costs and recording what it spent."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from latscope.dialects import DEFAULT_DIALECT, get_dialect
from latscope.dialects.openai import chat_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.faults import GATEWAY_CHUNK_MS, GATEWAY_HOP_MS
from latscope.lab.hop import HopLab
from latscope.lab.settings import LabSettings
from latscope.timeline import metrics
from latscope.timeline.model import Timeline
from latscope.wire import Client


def paced(step_ms: float) -> CostModel:
    """A token every ``step_ms``, prefill nearly free."""
    return CostModel.default().with_overrides(
        prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=step_ms, decode_per_seq_ms=0.0
    )


async def _streams(client: Client, url: str, count: int, max_tokens: int = 8) -> list[Timeline]:
    return [await client.request(chat_request("lab-model", f"hello {i}", max_tokens), url) for i in range(count)]


def test_no_hop_without_the_fault_or_its_settings() -> None:
    assert LabSettings().gateway_hop() is None
    assert LabSettings(faults=("gateway-overhead",)).gateway_hop() == (GATEWAY_HOP_MS, GATEWAY_CHUNK_MS)
    assert LabSettings(faults=("gateway-overhead",), gateway_chunk_ms=4.0).gateway_hop() == (GATEWAY_HOP_MS, 4.0)
    assert LabSettings(gateway_hop_ms=0.0).gateway_hop() == (0.0, 0.0)  # a thin proxy


def test_a_plain_lab_refuses_to_ignore_the_hop() -> None:
    with pytest.raises(ValueError, match="HopLab"):
        Lab(faults=["gateway-overhead"])


async def test_the_hop_forwards_streams_and_plain_answers_and_records_its_costs() -> None:
    async with HopLab(gateway_hop_ms=5.0, gateway_chunk_ms=1.0, cost=paced(4.0)) as lab, Client() as client:
        through = await _streams(client, lab.url, 2)
        direct = await _streams(client, lab.direct_url, 2)
        models, _ = await client.list_models(lab.url, get_dialect(DEFAULT_DIALECT))
        assert models == ["lab-model"]
        records = [r for r in lab.hop_records if r.chunks]
    assert all(t.ok and metrics.output_tokens(t) == 8 for t in through + direct)
    assert lab.url != lab.direct_url and len(records) == 2  # the direct requests did not pass the hop
    for record in records:
        assert record.status == 200 and record.chunks >= 8 and len(record.leading_chunks_ms) == 4
        assert record.request_ms >= 5.0 and record.chunk_ms >= record.chunks * 1.0


async def test_the_first_token_comes_later_by_the_request_and_the_leading_chunks_costs() -> None:
    async with HopLab(gateway_hop_ms=20.0, gateway_chunk_ms=2.0, cost=paced(5.0)) as lab, Client() as client:
        await _streams(client, lab.url, 1)
        await _streams(client, lab.direct_url, 1)
        through = await _streams(client, lab.url, 3)
        direct = await _streams(client, lab.direct_url, 3)
    difference = statistics.median(metrics.ttft_ms(t) or 0.0 for t in through) - statistics.median(
        metrics.ttft_ms(t) or 0.0 for t in direct
    )
    assert 20.0 + 2 * 2.0 <= difference <= 1.5 * (20.0 + 2 * 2.0), difference  # the role chunk, then the token


async def test_a_chunk_cost_above_the_decode_step_slows_the_stream() -> None:
    async with HopLab(gateway_hop_ms=0.0, gateway_chunk_ms=8.0, cost=paced(2.0)) as lab, Client() as client:
        (t,) = await _streams(client, lab.url, 1, max_tokens=12)
    assert statistics.median(metrics.itl_ms(t)) >= 7.0  # the gateway's conversion, not the 2 ms decode step


async def test_the_hop_serves_tls_in_front_of_a_tls_upstream() -> None:
    async with HopLab(faults=["gateway-overhead"], tls=True, cost=paced(2.0)) as lab:
        assert lab.url.startswith("https://") and lab.direct_url.startswith("https://")
        assert lab.cert_path is not None and lab.upstream_cert_path is not None
        async with Client(ca_file=str(lab.cert_path)) as client:
            (t,) = await _streams(client, lab.url, 1)
    assert t.ok and metrics.output_tokens(t) == 8


async def test_an_upstream_connection_closed_while_idle_is_replaced_without_failing_the_request() -> None:
    async with HopLab(gateway_hop_ms=0.0, keepalive_timeout_s=0.2, cost=paced(1.0)) as lab, Client() as client:
        (first,) = await _streams(client, lab.url, 1)
        await asyncio.sleep(0.5)  # the upstream closes the hop's idle connection meanwhile
        (second,) = await _streams(client, lab.url, 1)
        opened = lab.upstream.connections_accepted
    assert first.ok and second.ok, second.error
    assert opened == 2  # the idle one, closed by the upstream, and its replacement
    assert [r.status for r in lab.hop_records] == [200, 200]
