"""In delayed-ACK mode a new connection ACKs like a reused one: Nagle shows on its first stream."""

from __future__ import annotations

import statistics

import pytest

from latscope.dialects.openai import chat_request
from latscope.dialects.prompts import synthetic_prompt
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.timeline import metrics
from latscope.wire import Client
from latscope.wire.tcpinfo import delayed_ack_supported

COST = CostModel.default().with_overrides(decode_base_ms=5.0)


@pytest.mark.skipif(not delayed_ack_supported(), reason="TCP_QUICKACK is Linux-only")
async def test_a_new_connection_in_delayed_ack_mode_shows_nagle_and_a_default_one_does_not() -> None:
    async with Lab(profile="tuned", faults=["nagle", "no-keepalive"], cost=COST) as lab:
        ttfts: dict[str, list[float]] = {"default": [], "delayed": []}
        for name, client in (("default", Client()), ("delayed", Client(delayed_ack=True))):
            async with client:
                for i in range(3):
                    spec = chat_request("lab-model", synthetic_prompt(16, 500 + i), 8)
                    t = await client.request(spec, lab.url, new_connection=True)
                    assert t.ok and t.connection is not None and not t.connection.reused
                    assert t.connection.delayed_ack is (name == "delayed")
                    ttft = metrics.ttft_ms(t)
                    assert ttft is not None
                    ttfts[name].append(ttft)
    # the control is the same request on an ordinary new connection; Nagle waits for the ~40 ms delayed ACK
    assert statistics.median(ttfts["delayed"]) > 3 * statistics.median(ttfts["default"])
