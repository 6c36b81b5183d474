"""The lab's HTTP API, as an OpenAI-compatible client sees it."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import orjson
import pytest

from latscope.dialects.openai import chat_request, completions_request
from latscope.lab.app import Lab
from latscope.lab.costmodel import CostModel
from latscope.timeline.model import EventKind
from latscope.wire import Client
from tests.lab import rawhttp

#: Fast steps so streams of a few tokens take milliseconds.
QUICK = CostModel.default().with_overrides(
    prefill_base_ms=0.5, prefill_per_token_ms=0.0, decode_base_ms=1.0, decode_per_seq_ms=0.0
)


#: The [DONE] event followed by the last chunk of the chunked coding: a complete streamed response.
END_OF_STREAM = b"data: [DONE]\n\n\r\n0\r\n\r\n"


def _events(body: bytes) -> list[bytes]:
    return [part.removeprefix(b"data: ") for part in body.split(b"\n\n") if part]


async def test_models_lists_the_served_model() -> None:
    async with Lab(model="tiny-lab", cost=QUICK) as lab, httpx.AsyncClient() as http:
        response = await http.get(lab.url + "/models")
        assert response.status_code == 200
        assert [m["id"] for m in response.json()["data"]] == ["tiny-lab"]
        one = await http.get(lab.url + "/models/tiny-lab")
        assert one.json()["id"] == "tiny-lab"


async def test_health_reports_ok_and_an_idle_engine() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient() as http:
        response = await http.get(lab.origin + "/health")
        assert response.status_code == 200
        assert response.json()["status"] == "ok"
        assert response.json()["running"] == 0


async def test_metrics_serves_prometheus_text_with_lab_names() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient() as http:
        await http.post(lab.url + "/chat/completions", content=rawhttp.chat_body(2))
        response = await http.get(lab.origin + "/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert "latscope_lab_" in response.text


async def test_metrics_can_use_vllm_names() -> None:
    async with Lab(cost=QUICK, metrics_names="vllm") as lab, httpx.AsyncClient() as http:
        response = await http.get(lab.origin + "/metrics")
        assert "vllm:num_requests_running" in response.text


async def test_streamed_chat_sends_role_tokens_finish_usage_and_done() -> None:
    async with Lab(cost=QUICK) as lab, Client() as client:
        t = await client.request(chat_request("lab-model", "hello there", 5, include_usage=True), lab.url)
    assert t.error is None and t.status == 200
    kinds = [e.kind for e in t.events]
    assert kinds[0] is EventKind.ROLE
    assert kinds[1:6] == [EventKind.CONTENT] * 5
    assert kinds[-1] is EventKind.DONE
    assert EventKind.FINISH in kinds and EventKind.USAGE in kinds
    assert t.finish_reason == "length"
    assert t.usage is not None and t.usage.completion_tokens == 5
    headers = t.response_headers
    assert headers["content-type"] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    assert headers["x-accel-buffering"] == "no"
    assert headers["x-request-id"].startswith("chatcmpl-")
    assert [part.split(";")[0] for part in headers["server-timing"].split(", ")] == [
        "parse",
        "validate",
        "queue",
        "prefill",
    ]


async def test_final_chunk_carries_llama_timings_and_the_lab_fields() -> None:
    async with Lab(cost=QUICK) as lab:
        response = await rawhttp.exchange(
            lab.host,
            lab.port,
            rawhttp.post(
                "/v1/chat/completions", rawhttp.chat_body(3, stream=True, stream_options={"include_usage": True})
            ),
            until=END_OF_STREAM,
        )
    ((head, body),) = response.responses()
    assert head.status_code == 200
    events = [e for e in _events(body) if e.startswith(b"{")]
    usage_chunk = orjson.loads(events[-1])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 3
    assert set(usage_chunk["timings"]) == {
        "prompt_n",
        "prompt_ms",
        "prompt_per_token_ms",
        "prompt_per_second",
        "predicted_n",
        "predicted_ms",
        "predicted_per_token_ms",
        "predicted_per_second",
        "cache_n",
    }
    assert usage_chunk["timings"]["predicted_n"] == 3
    assert {
        "queue_ms",
        "parse_ms",
        "validate_ms",
        "prefill_ms",
        "decode_ms",
        "window_wait_ms",
        "preemptions",
        "request_id",
    } <= set(usage_chunk["latscope"])


async def test_non_streamed_chat_returns_a_completion_with_usage_and_timings() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient() as http:
        response = await http.post(lab.url + "/chat/completions", content=rawhttp.chat_body(4))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"].split()) == 4
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4
    assert body["timings"]["predicted_n"] == 4
    assert "decode;dur=" in response.headers["server-timing"]


async def test_completions_streamed_and_not() -> None:
    async with Lab(cost=QUICK) as lab, Client() as client, httpx.AsyncClient() as http:
        t = await client.request(completions_request("lab-model", "Once upon a time", 4), lab.url)
        plain = await http.post(
            lab.url + "/completions", json={"model": "lab-model", "prompt": "Once upon a time", "max_tokens": 4}
        )
    assert t.error is None
    assert [e.kind for e in t.events].count(EventKind.CONTENT) == 4
    assert EventKind.ROLE not in [e.kind for e in t.events]
    assert plain.json()["object"] == "text_completion"
    assert len(plain.json()["choices"][0]["text"].split()) == 4


async def test_same_seed_gives_the_same_text() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient() as http:
        texts = [
            (await http.post(lab.url + "/chat/completions", content=rawhttp.chat_body(6, seed=7))).json()["choices"][0][
                "message"
            ]["content"]
            for _ in range(2)
        ]
    assert texts[0] == texts[1]


async def test_truth_stamps_every_chunk_with_its_send_time() -> None:
    async with Lab(cost=QUICK, truth=True) as lab, Client() as client:
        t = await client.request(chat_request("lab-model", "hi", 5), lab.url)
    stamped = [e for e in t.events if e.kind is not EventKind.DONE]
    assert stamped and all(e.server_sent_ns is not None for e in stamped)
    # Same machine, same clock: every event was sent before the client read it.
    assert all(e.server_sent_ns is not None and e.server_sent_ns <= e.at_ns for e in stamped)


async def test_records_hold_what_the_lab_injected() -> None:
    async with Lab(cost=QUICK) as lab, Client() as client:
        t = await client.request(chat_request("lab-model", "hello there", 3), lab.url)
        record = lab.records[-1]
    assert record.request_id == t.response_headers["x-request-id"]
    assert record.status == 200 and record.stream and not record.cancelled
    assert record.completion_tokens == 3
    assert record.parse_ms is not None and record.prefill_ms is not None and record.prefill_ms >= 0.5
    assert record.events_written == 1 + 3 + 2 + 1  # role, tokens, finish, usage, [DONE]
    assert record.write_calls == record.events_written  # one write per event


async def test_api_key_is_required_when_configured() -> None:
    async with Lab(cost=QUICK, api_key="sekrit") as lab, httpx.AsyncClient() as http:
        missing = await http.get(lab.url + "/models")
        wrong = await http.get(lab.url + "/models", headers={"authorization": "Bearer nope"})
        right = await http.get(lab.url + "/models", headers={"authorization": "Bearer sekrit"})
        health = await http.get(lab.origin + "/health")
    assert missing.status_code == 401 and wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200
    assert health.status_code == 200  # probes need no key


async def test_unknown_path_is_404_and_wrong_method_405() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient() as http:
        missing = await http.get(lab.url + "/nope")
        wrong = await http.get(lab.url + "/chat/completions")
    assert missing.status_code == 404
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"


async def test_tls_certificate_verifies_for_localhost_and_loopback_ips() -> None:
    async with Lab(cost=QUICK, tls=True) as lab:
        assert lab.url.startswith("https://") and lab.cert_path is not None
        context = ssl.create_default_context(cafile=str(lab.cert_path))  # hostname checking on
        for host in ("localhost", "127.0.0.1"):
            async with httpx.AsyncClient(verify=context) as http:
                response = await http.get(f"https://{host}:{lab.port}/v1/models")
            assert response.status_code == 200


async def test_http2_is_negotiated_by_alpn_over_tls() -> None:
    async with Lab(cost=QUICK, tls=True) as lab, Client(ca_file=str(lab.cert_path)) as client:
        t = await client.request(chat_request("lab-model", "hello", 4), lab.url)
    assert t.error is None
    assert t.connection is not None and t.connection.alpn == "h2" and t.connection.http_version == "HTTP/2"
    assert [e.kind for e in t.events].count(EventKind.CONTENT) == 4


async def test_http2_multiplexes_concurrent_streams_on_one_connection() -> None:
    async with Lab(cost=QUICK, tls=True) as lab, Client(ca_file=str(lab.cert_path)) as client:
        timelines = await asyncio.gather(
            *(client.request(chat_request("lab-model", "hello", 6), lab.url) for _ in range(5))
        )
        connections = {r.connection_id for r in lab.records}
    assert all(t.error is None for t in timelines)
    assert connections == {1}
    assert all(r.http_version == "2" for r in lab.records)


async def test_cleartext_http2_prior_knowledge_is_accepted() -> None:
    async with Lab(cost=QUICK) as lab, httpx.AsyncClient(http1=False, http2=True) as http:
        response = await http.post(lab.url + "/chat/completions", content=rawhttp.chat_body(3))
    assert response.status_code == 200 and response.http_version == "HTTP/2"
    assert response.json()["usage"]["completion_tokens"] == 3


async def test_port_zero_binds_an_ephemeral_loopback_port() -> None:
    async with Lab(cost=QUICK) as lab:
        assert lab.host == "127.0.0.1" and lab.port > 0
        assert lab.url == f"http://127.0.0.1:{lab.port}/v1"


@pytest.mark.parametrize("version", ["1.0", "1.1"])
async def test_streams_to_http10_and_http11_clients(version: str) -> None:
    async with Lab(cost=QUICK) as lab:
        request = rawhttp.post("/v1/chat/completions", rawhttp.chat_body(3, stream=True)).replace(
            b"HTTP/1.1", f"HTTP/{version}".encode(), 1
        )
        response = await rawhttp.exchange(lab.host, lab.port, request, until=b"[DONE]")
    assert b"200" in response.data.split(b"\r\n", 1)[0]
    chunked = b"transfer-encoding: chunked" in response.data.lower()
    assert chunked is (version == "1.1")  # HTTP/1.0 has no chunked coding: the body ends with the connection
    assert response.data.count(b"data: ") == 1 + 3 + 1 + 1  # role, tokens, finish (with timings), [DONE]
