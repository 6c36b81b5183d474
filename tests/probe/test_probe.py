"""The probe API: model discovery, one pool for all requests (first cold, the rest reused), JSON, early stop."""

from __future__ import annotations

import socket

import orjson
import pytest

import latscope
from latscope.probe import ProbeError, probe
from latscope.timeline import Phase, loads
from latscope.wire import WireError
from latscope.wire.models import normalise_base_url
from latscope.wire.target import Target
from tests.support.stream_server import Received, Reply, StreamServer, models_handler, paced_stream


def test_a_url_without_a_path_gets_v1() -> None:
    assert normalise_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalise_base_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"
    assert normalise_base_url("https://h/openai/v1/") == "https://h/openai/v1"
    assert normalise_base_url("localhost:8080") == "http://localhost:8080/v1"


async def test_probe_uses_the_first_listed_model_and_reuses_one_connection() -> None:
    handler = models_handler(paced_stream(5), models=("first-model", "second-model"))
    async with StreamServer(handler) as server:
        result = await probe(server.base_url.removesuffix("/v1"), n=3, max_tokens=8)
    assert result.ok and result.model == "first-model" and result.models == ["first-model", "second-model"]
    chats = [r for r in server.requests if r.method == "POST"]
    assert len(chats) == 3 and all(r.target == "/v1/chat/completions" for r in chats)
    assert orjson.loads(chats[0].body)["model"] == "first-model"
    reused = [t.connection.reused for t in result.timelines if t.connection is not None]
    assert reused == [False, True, True]  # the /models lookup did not warm the first request's connection
    assert len({r.connection_index for r in chats}) == 1
    assert result.models_timeline is not None and result.models_timeline.method == "GET"


async def test_probe_with_a_model_skips_the_lookup_and_sends_the_key_as_bearer() -> None:
    async with StreamServer(paced_stream(2)) as server:
        result = await probe(
            Target.resolve(server.base_url, api_key="sk-test-secret", dialect="openai.completions"), model="m", n=1
        )
    assert result.ok and result.models == [] and result.models_timeline is None
    posts = [r for r in server.requests if r.method == "POST"]  # the others are the /metrics scrapes
    assert [r.target for r in posts] == ["/v1/completions"]
    assert posts[0].header("authorization") == "Bearer sk-test-secret"
    assert b"sk-test-secret" not in orjson.dumps(result.to_dict())


async def test_probe_result_serialises_timelines_and_metrics() -> None:
    async with StreamServer(models_handler(paced_stream(3))) as server:
        result = await probe(server.base_url, n=2)
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert data["schema"] == "latscope.probe/1"
    assert data["target"]["model"] == "test-model" and data["target"]["http_version"] == "HTTP/1.1"
    assert len(data["requests"]) == 2
    first = data["requests"][0]
    assert first["metrics"]["ttft_ms"] > 0 and first["metrics"]["output_tokens"] == 3
    assert loads(orjson.dumps(first["timeline"])).events  # a valid latscope.timeline/1 record


async def test_probe_stops_early_when_the_target_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await probe(f"http://127.0.0.1:{port}", model="m", n=3)
    assert len(result.timelines) == 1 and not result.reachable
    assert result.timelines[0].error is not None and result.timelines[0].error.phase is Phase.CONNECT


async def test_probe_without_a_model_raises_when_the_list_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(WireError) as raised:
        await probe(f"http://127.0.0.1:{port}")
    assert raised.value.phase is Phase.CONNECT


async def test_probe_raises_a_clear_error_when_no_model_is_listed() -> None:
    async def empty(request: Received, reply: Reply) -> None:
        await reply.send_json(200, {"object": "list", "data": []})

    async with StreamServer(empty) as server:
        with pytest.raises(ProbeError, match="lists no model"):
            await probe(server.base_url)


async def test_the_package_itself_is_callable_as_probe() -> None:
    async with StreamServer(paced_stream(1)) as server:
        result = await latscope.probe(server.base_url, model="m", n=1)
    assert result.ok
