"""Fuzzing the lab's input side: whatever arrives, the answer is a response or a closed connection, never a crash."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.lab.errors import ErrorResponse
from latscope.lab.gateway import Endpoint, Gateway
from tests.lab import rawhttp

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)

#: Documents shaped like requests, with any field possibly of the wrong type.
request_like = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["lab-model", "other"]) | json_values,
        "messages": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "role": st.sampled_from(["user", "system", "bot"]) | json_values,
                    "content": st.text(max_size=30) | json_values,
                    "name": json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "prompt": st.text(max_size=30) | st.lists(st.integers(0, 50_000), max_size=5) | json_values,
        "max_tokens": st.integers(-5, 300_000) | json_values,
        "stream": json_values,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values}) | json_values,
        "seed": st.integers() | json_values,
        "n": json_values,
        "temperature": json_values,
        "user": json_values,
    },
)


def _parse_or_refuse(body: bytes, endpoint: Endpoint, slow: bool) -> None:
    gateway = Gateway(model="lab-model", api_key=None, slow_parse=slow, max_context_tokens=131_072)
    try:
        parsed = gateway.parse(endpoint, body)
    except ErrorResponse as error:
        assert 400 <= error.status < 500
        assert set(orjson.loads(error.body())["error"]) == {"message", "type", "param", "code"}
        return
    assert parsed.prompt_tokens >= 1 and parsed.max_tokens >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=request_like, endpoint=st.sampled_from(list(Endpoint)), slow=st.booleans())
def test_gateway_accepts_or_refuses_any_document(document: dict[str, Any], endpoint: Endpoint, slow: bool) -> None:
    _parse_or_refuse(json.dumps(document).encode(), endpoint, slow)  # stdlib: integers of any size


@settings(max_examples=100, deadline=None)
@given(body=st.binary(max_size=200), slow=st.booleans())
def test_gateway_accepts_or_refuses_any_bytes(body: bytes, slow: bool) -> None:
    _parse_or_refuse(body, Endpoint.CHAT, slow)


DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE_INTEGER = b'{"model": "lab-model", "seed": ' + b"9" * 5000 + b"}"


@pytest.mark.parametrize("body", [DEEP, HUGE_INTEGER], ids=["deep", "huge-integer"])
@pytest.mark.parametrize("slow", [False, True])
def test_gateway_refuses_pathological_json(body: bytes, slow: bool) -> None:
    with pytest.raises(ErrorResponse) as info:
        Gateway(model="lab-model", api_key=None, slow_parse=slow, max_context_tokens=131_072).parse(Endpoint.CHAT, body)
    assert info.value.status == 400


def _mutations(rng: random.Random, count: int) -> list[bytes]:
    """Valid requests damaged at random: bytes flipped, cut short, CR/LF and NULs sprinkled in, parts repeated."""
    seeds = [
        rawhttp.post("/v1/chat/completions", rawhttp.chat_body(2)),
        rawhttp.post("/v1/completions", b'{"model": "lab-model", "prompt": "hi", "max_tokens": 2}'),
        rawhttp.get("/v1/models"),
        b'POST /v1/chat/completions HTTP/1.1\r\nhost: lab\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"a":\r\n0\r\n\r\n',
    ]
    out = []
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(5)
            at = rng.randrange(len(data))
            if kind == 0:
                data[at] = rng.randrange(256)
            elif kind == 1:
                del data[at:]
            elif kind == 2:
                data[at:at] = rng.choice([b"\r\n", b"\n", b"\x00", b" ", b":", b"\r\n\r\n"])
            elif kind == 3:
                data[at:at] = data[at : at + rng.randint(1, 40)] * rng.randint(2, 50)
            else:
                del data[at : at + rng.randint(1, 10)]
            if not data:
                data = bytearray(b"\r\n")
        out.append(bytes(data))
    return out


async def test_damaged_http_requests_never_break_the_server(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cost = CostModel.default().with_overrides(prefill_base_ms=0.2, prefill_per_token_ms=0.0, decode_base_ms=0.5)
    payloads = _mutations(random.Random(20_240_601), 240)
    async with Lab(cost=cost, header_timeout_s=0.3, keepalive_timeout_s=0.3) as lab:
        for start in range(0, len(payloads), 40):  # 40 connections at a time
            responses = await asyncio.gather(
                *(rawhttp.exchange(lab.host, lab.port, payload, timeout=3) for payload in payloads[start : start + 40])
            )
            for response in responses:
                # An answer, if any, is a well-formed status line.
                assert not response.data or response.data.startswith(b"HTTP/1.1 ")
        healthy = await rawhttp.exchange(lab.host, lab.port, rawhttp.get("/health"), until=b'"status":"ok"')
        assert healthy.data.startswith(b"HTTP/1.1 200 ")
        assert lab.scheduler.running == 0 or await _drained(lab)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def _drained(lab: Lab) -> bool:
    for _ in range(300):
        if lab.scheduler.running == 0 and lab.scheduler.waiting == 0:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_damaged_http2_frames_never_break_the_server(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    rng = random.Random(7)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings_frame = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    payloads = [
        preface + settings_frame + bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))) for _ in range(40)
    ]
    async with Lab(header_timeout_s=0.3, keepalive_timeout_s=0.3) as lab:
        await asyncio.gather(*(rawhttp.exchange(lab.host, lab.port, payload, timeout=3) for payload in payloads))
        healthy = await rawhttp.exchange(lab.host, lab.port, rawhttp.get("/health"), until=b'"status":"ok"')
    assert healthy.data.startswith(b"HTTP/1.1 200 ")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
