"""llama.cpp's ``llama-server`` speaks Anthropic Messages (``/v1/messages``) and OpenAI Responses (``/v1/responses``)
beside its OpenAI chat route: latscope's client records a whole stream in each of those dialects from a real server
(its tokens as events, the server's usage at the limit asked for), and the diagnosis runs through them unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from latscope.diagnose import diagnose
from latscope.diagnose.context import REQUEST_TIMEOUTS
from latscope.dialects import get_dialect
from latscope.findings import Finding
from latscope.timeline.model import TOKEN_KINDS
from latscope.wire import Client
from latscope.wire.target import Target
from tests.real.native_server import llama_server_binary, running_native_server
from tests.support.diagnosis import explain

pytestmark = pytest.mark.timeout(240)

DIALECTS = ("anthropic.messages", "openai.responses")
MAX_TOKENS = 12


async def test_a_real_server_streams_in_each_dialect_with_usage_that_matches_the_tokens(tmp_path: Path) -> None:
    with running_native_server(llama_server_binary(), tmp_path, parallel=1) as server:
        async with Client() as client:
            timelines = {
                name: await client.request(
                    get_dialect(name).build_request("tiny-llama", "Say hello to the network", MAX_TOKENS),
                    server.base_url,
                )
                for name in DIALECTS
            }
        log = server.log_tail()
    for name, t in timelines.items():
        assert t.error is None, (name, t.error, log)
        assert t.status == 200 and t.first_token_ns is not None, name
        # a random model's token may end inside a UTF-8 character: llama-server sends it with the next one, so a
        # delta can carry two tokens and the events count at most what the server's usage says
        counted = sum(e.tokens for e in t.events if e.kind in TOKEN_KINDS)
        assert t.usage is not None and t.usage.completion_tokens == MAX_TOKENS, (name, t.usage)
        assert MAX_TOKENS // 2 <= counted <= MAX_TOKENS, (name, counted)


async def test_the_diagnosis_runs_through_the_anthropic_dialect_against_a_real_server(tmp_path: Path) -> None:
    # two slots: a third and fourth request at once wait, as through OpenAI's route (test_llama_server_engine.py)
    with running_native_server(llama_server_binary(), tmp_path, parallel=2) as server:
        result = await diagnose(
            Target.resolve(server.base_url, dialect="anthropic.messages", timeouts=REQUEST_TIMEOUTS),
            model="tiny-llama",
            quick=True,
            only="capacity-saturation",
        )
        log = server.log_tail()
    outcome = result.outcome("capacity-saturation")
    assert isinstance(outcome, Finding), explain(result) + "\n" + log
    assert outcome.evidence["capacity"] == 2, outcome.evidence
