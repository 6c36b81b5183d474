"""The probe's server-signal integration: the join from what the client keeps, the TTFT sides, the metrics scrape and
the trace-context opt-out."""

from __future__ import annotations

from pathlib import Path

import orjson

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.probe import TtftSides, probe, ttft_side
from latscope.signals.join import TtftPart, TtftSplit, join_server_signals, ttft_split
from latscope.signals.scrape import MetricsWindow, NotAvailable
from latscope.timeline.model import Read, Timeline
from latscope.wire.exchange import Exchange
from latscope.wire.target import Target
from tests.support.httpfile import load_capture
from tests.support.stream_server import Handler, Received, Reply, StreamServer, paced_stream

MS = 1_000_000
T0 = 1_000 * MS
VLLM_AFTER = (Path(__file__).resolve().parent.parent / "fixtures" / "prometheus" / "vllm.after.prom").read_bytes()


async def _llama_server_timeline() -> Timeline:
    """The real llama.cpp stream capture fed through the client's Exchange, as the wire client records it: one read
    per HTTP chunk, 1 ms apart, after a 1 ms connect and a 0.1 ms send."""
    capture = load_capture("llama-server.chat.stream.http")
    t = Timeline(started_ns=T0, connection_ready_ns=T0 + 1 * MS, send_start_ns=T0 + 1 * MS)
    t.send_end_ns = T0 + 1 * MS + MS // 10
    exchange = Exchange(t, decoder=OpenAIStreamDecoder("chat"), streamed=True)
    at = T0 + 25 * MS
    t.first_byte_ns = at
    exchange.response(capture.status, capture.headers, at)
    for index, chunk in enumerate(capture.chunks):
        at += 1 * MS
        t.reads.append(Read(at, len(chunk)))
        exchange.body(chunk, at, index)
    exchange.end(at)
    return t


async def test_llamacpp_timings_from_the_final_chunk_become_prefill_and_decode() -> None:
    t = await _llama_server_timeline()
    assert t.ok and isinstance(t.server_fields.get("timings"), dict)  # where the client keeps the final chunk's
    assert t.server == []  # the client itself joins nothing
    join_server_signals(t)
    assert [(m.name, m.ms, m.source) for m in t.server] == [
        ("prefill", 18.214, "body:timings.prompt_ms"),
        ("decode", 1.693, "body:timings.predicted_ms"),
    ]
    join_server_signals(t)
    assert len(t.server) == 2  # joining again adds nothing


async def test_llamacpp_prefill_is_the_server_side_of_its_ttft() -> None:
    t = await _llama_server_timeline()
    join_server_signals(t)
    split = ttft_split(t)
    assert split is not None
    assert split.ms("prefill") == 18.214 and split.ms("connection") == 1.0 and split.ms("send") == 0.1
    sides = TtftSides.of(split)
    assert sides.server_ns == 18_214_000 and sides.client_ns == 1_100_000
    assert t.first_token_ns is not None
    assert sides.client_ns + sides.server_ns + sides.unattributed_ns == sides.ttft_ns == t.first_token_ns - T0


def test_every_split_term_has_a_side() -> None:
    names = ["connection", "send", "connection_send", "parse", "queue", "load", "prefill", "network", "other"]
    assert [ttft_side(name) for name in [*names, "network_and_other"]] == [
        "client",
        "client",
        "client",
        "server",
        "server",
        "server",
        "server",
        "unattributed",
        "unattributed",
        "unattributed",
    ]
    split = TtftSplit(100, (TtftPart("send", 10, "c"), TtftPart("queue", 95, "s"), TtftPart("other", -5, "r")))
    assert TtftSides.of(split) == TtftSides(ttft_ns=100, client_ns=10, server_ns=95, unattributed_ns=-5)


def _metrics_and_stream(metrics_path: str, metrics: tuple[int, bytes]) -> Handler:
    """Prometheus text (or an error) at ``metrics_path``, 404 for other GETs, a short stream for POSTs."""
    stream = paced_stream(2)

    async def handler(request: Received, reply: Reply) -> None:
        if request.method == "GET" and request.target == metrics_path:
            status, body = metrics
            await reply.start(status, [("content-type", "text/plain"), ("content-length", str(len(body)))])
            await reply.send(body)
            await reply.end()
            return
        if request.method == "GET":
            await reply.send_json(404, {"error": {"message": "no such route"}})
            return
        await stream(request, reply)

    return handler


async def test_the_default_scrape_reads_the_targets_origin_before_and_after() -> None:
    async with StreamServer(_metrics_and_stream("/metrics", (200, VLLM_AFTER))) as server:
        result = await probe(server.base_url, model="m", n=2)
    assert [(r.method, r.target) for r in server.requests] == [
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/metrics"),
    ]
    window = result.server_metrics
    assert isinstance(window, MetricsWindow) and window.family == "vllm"
    assert window.stats is not None and window.stats.requests_finished == 0.0  # the same text twice: no change
    assert all(r.header("traceparent") is None for r in server.requests if r.method == "GET")


async def test_a_target_without_metrics_is_a_clear_non_fatal_result() -> None:
    async with StreamServer(_metrics_and_stream("/elsewhere", (200, b""))) as server:
        result = await probe(server.base_url, model="m", n=1)
    assert result.ok
    assert isinstance(result.server_metrics, NotAvailable)
    assert result.server_metrics.why == "it answered HTTP 404"
    data = orjson.loads(orjson.dumps(result.to_dict()))
    assert data["server_metrics"] == {
        "url": f"{server.base_url.removesuffix('/v1')}/metrics",
        "available": False,
        "why": "it answered HTTP 404",
    }


async def test_no_metrics_means_no_scrape() -> None:
    async with StreamServer(paced_stream(1)) as server:
        result = await probe(server.base_url, model="m", n=1, scrape_metrics=False)
    assert [r.method for r in server.requests] == ["POST"]
    assert result.server_metrics is None and result.to_dict()["server_metrics"] is None


async def test_a_metrics_url_on_another_origin_never_gets_the_api_key() -> None:
    metrics = _metrics_and_stream("/custom", (200, VLLM_AFTER))
    async with StreamServer(paced_stream(1)) as target, StreamServer(metrics) as exporter:
        url = exporter.base_url.removesuffix("/v1") + "/custom"
        result = await probe(Target.resolve(target.base_url, api_key="sk-secret"), model="m", n=1, metrics_url=url)
    assert isinstance(result.server_metrics, MetricsWindow) and result.server_metrics.url == url
    assert [r.target for r in exporter.requests] == ["/custom", "/custom"]
    assert all(r.header("authorization") is None for r in exporter.requests)
    assert target.requests[0].header("authorization") == "Bearer sk-secret"


async def test_trace_context_is_sent_unless_turned_off() -> None:
    async with StreamServer(paced_stream(1)) as server:
        on = await probe(server.base_url, model="m", n=1, scrape_metrics=False)
        off = await probe(Target.resolve(server.base_url, trace_context=False), model="m", n=1, scrape_metrics=False)
    sent = [r.header("traceparent") for r in server.requests]
    assert sent[0] is not None and on.timelines[0].trace_id is not None and on.timelines[0].trace_id in sent[0]
    assert sent[1] is None and off.timelines[0].trace_id is None
