"""The response's own id, read from a stream's first bytes (``Timeline.response_id``): what tells a replayed answer
from one generated anew. Against the lab in each dialect, and on bytes that must not be taken for one."""

from __future__ import annotations

import pytest

from latscope.dialects import get_dialect
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.wire import Client
from latscope.wire.exchange import RESPONSE_ID

PREFIXES = {
    "openai.chat": "chatcmpl-",
    "openai.completions": "cmpl-",
    "openai.responses": "resp_",
    "anthropic.messages": "msg_",
    "tgi.generate": None,  # token objects with numeric ids: no response id
    "ollama.chat": None,  # NDJSON lines without one
}


@pytest.mark.parametrize(("dialect", "prefix"), PREFIXES.items(), ids=list(PREFIXES))
async def test_each_dialects_stream_names_its_response(dialect: str, prefix: str | None) -> None:
    speaks = get_dialect(dialect)
    async with Lab(cost=CostModel.zero()) as lab, Client() as client:
        base = lab.origin + speaks.base_path
        first = await client.request(speaks.build_request("lab-model", "hi", 4), base)
        second = await client.request(speaks.build_request("lab-model", "hi", 4), base)
    assert first.ok and second.ok
    if prefix is None:
        assert first.response_id is None
    else:
        assert first.response_id is not None and first.response_id.startswith(prefix), first.response_id
        assert second.response_id != first.response_id  # each generation its own


@pytest.mark.parametrize(
    "data",
    [
        b'data: {"index":1,"token":{"id":17,"text":" a"}}',  # a number, not a string
        b'data: {"choices":[{"delta":{"content":"say \\"id\\":\\"x\\""}}]}',  # inside an escaped string
        b'data: {"idx":"a","ids":"b"}',
    ],
)
def test_what_is_not_a_response_id(data: bytes) -> None:
    assert RESPONSE_ID.search(data) is None
