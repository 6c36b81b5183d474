"""vLLM's own bytes (tests/fixtures/real/vllm.*, captured from vLLM 0.32.0's CPU build serving the tiny random Llama):
its streams are decoded to the tokens it generated, its per-request ``metrics`` become the request's server phases,
its errors and its ``/metrics`` are read as the server meant them.

vLLM sends one SSE event per engine output. Many carry ``"content": ""`` (a byte token that completed no character
of a random model's text) and the last one is the finish chunk, with empty text too; counting only events with text
would make 12 generated tokens look like 2.
"""

from __future__ import annotations

import orjson
import pytest

from latscope.dialects import get_dialect
from latscope.dialects.base import Chunk
from latscope.dialects.errors import decode_error_body
from latscope.signals.body import body_measures, parse_vllm_metrics
from latscope.signals.engines import window_stats
from latscope.signals.join import join_server_signals, ttft_split
from latscope.signals.prometheus import parse_exposition
from latscope.timeline.metrics import output_tokens, token_count_source
from latscope.timeline.model import VLLM_METRICS_FIELD, EventKind, ServerPhase, StreamEvent, Timeline, Usage
from tests.support.httpfile import load_capture


def _decode(name: str, mode: str = "chat", pieces: int | None = None) -> tuple[list[Chunk], object]:
    capture = load_capture(f"vllm.{name}.http")
    assert capture.status == 200 and (capture.header("content-type") or "").startswith("text/event-stream")
    decoder = get_dialect(f"openai.{mode}").new_decoder()
    body = capture.body
    parts = capture.chunks if pieces is None else [body[i : i + pieces] for i in range(0, len(body), pieces)]
    chunks = [chunk for part in parts for chunk in decoder.feed(part)]
    chunks += decoder.close()
    assert decoder.warnings == []
    return chunks, decoder


def _usage(chunks: list[Chunk]) -> Usage:
    (usage,) = [c.usage for c in chunks if c.usage is not None]
    return usage


@pytest.mark.parametrize(("name", "mode"), [("chat.stream", "chat"), ("completions.stream", "completions")])
def test_every_generated_token_is_counted_though_most_events_carry_no_text(name: str, mode: str) -> None:
    chunks, decoder = _decode(name, mode)
    usage = _usage(chunks)
    tokens = [c for c in chunks if c.tokens]
    assert sum(c.tokens for c in chunks) == usage.completion_tokens
    assert sum(1 for c in tokens if not c.text) >= usage.completion_tokens // 2  # most carried no text
    assert tokens[-1].finish_reason == "length" and tokens[-1].kind is EventKind.CONTENT  # the finish chunk's token
    assert decoder.counted_token_ids is False  # type: ignore[attr-defined]


def test_return_token_ids_counts_the_ids_listed() -> None:
    chunks, decoder = _decode("chat.stream.token-ids")
    assert sum(c.tokens for c in chunks) == _usage(chunks).completion_tokens == 12
    assert decoder.counted_token_ids is True  # type: ignore[attr-defined]


def test_an_event_that_lists_several_token_ids_counts_each() -> None:
    """``--stream-interval 3``: one event per three engine steps, each listing the three ids it carries."""
    body = load_capture("vllm.chat.stream.token-ids.http").body
    line = next(raw for raw in body.split(b"\n") if b'"token_ids":[' in raw and b'"finish_reason":null' in raw)
    event = orjson.loads(line.removeprefix(b"data: "))
    event["choices"][0]["token_ids"] = [11, 12, 13]
    event["choices"][0]["delta"]["content"] = "word"
    decoder = get_dialect("openai.chat").new_decoder()
    (chunk,) = decoder.feed(b"data: " + orjson.dumps(event) + b"\n\n")
    assert (chunk.kind, chunk.tokens, chunk.text) == (EventKind.CONTENT, 3, "word")


@pytest.mark.parametrize("size", [1, 7, 64])
def test_read_by_read_decodes_as_whole(size: int) -> None:
    for name in ("chat.stream", "chat.stream.token-ids"):
        assert _decode(name, pieces=size)[0] == _decode(name)[0]


def test_per_request_metrics_become_the_requests_server_phases() -> None:
    chunks, _ = _decode("chat.stream")
    (extra,) = [c.extra for c in chunks if c.extra]
    raw = extra[VLLM_METRICS_FIELD]
    # a timeline as the client leaves it: the extra merged into server_fields, the usage, one token event per chunk
    timeline = Timeline(started_ns=0, send_end_ns=1_000_000, first_token_ns=20_000_000, last_token_ns=60_000_000)
    timeline.server_fields.update(extra)
    timeline.usage = _usage(chunks)
    join_server_signals(timeline)
    measures = {m.name: m for m in timeline.server}
    assert measures[ServerPhase.QUEUE].ms == raw["queue_time_ms"]
    assert measures[ServerPhase.PREFILL].ms == raw["time_to_first_token_ms"]
    assert measures[ServerPhase.DECODE].ms == raw["generation_time_ms"]
    assert measures[ServerPhase.PREFILL].source == "body:metrics.time_to_first_token_ms"
    split = ttft_split(timeline)
    assert split is not None and split.consistent
    assert sum(part.ns for part in split.parts) == split.ttft_ns
    assert split.ms("queue") == pytest.approx(raw["queue_time_ms"], abs=1e-6)
    assert split.ms("prefill") == pytest.approx(raw["time_to_first_token_ms"], abs=1e-6)
    assert token_count_source(timeline) == "usage" and output_tokens(timeline) == 12


def test_without_usage_the_timeline_says_the_events_or_the_ids_counted() -> None:
    timeline = Timeline(events=[StreamEvent(i, i, EventKind.CONTENT, 0, 1, None, 0) for i in range(3)])
    assert (token_count_source(timeline), output_tokens(timeline)) == ("events", 3)
    timeline.tokens_from_ids = True
    assert token_count_source(timeline) == "token_ids"


def test_the_non_streamed_body_carries_the_same_metrics() -> None:
    body = orjson.loads(load_capture("vllm.chat.nonstream.http").body)
    names = {m.name: m.ms for m in body_measures(body)}
    metrics = parse_vllm_metrics(body["metrics"])
    assert names == {"queue": metrics.queue_ms, "prefill": metrics.ttft_ms, "decode": metrics.generation_ms}
    decoded = get_dialect("openai.chat").decode_response(load_capture("vllm.chat.nonstream.http").body)
    assert decoded.usage is not None and decoded.usage.completion_tokens == 8


def test_a_malformed_metrics_field_is_a_warning_not_a_measure() -> None:
    warnings: list[str] = []
    assert body_measures({"metrics": {"queue_time_ms": "soon", "generation_time_ms": -1}}, warnings=warnings) == []
    assert len(warnings) == 2 and all("metrics." in w for w in warnings)


def test_the_error_names_the_parameter() -> None:
    capture = load_capture("vllm.chat.badrequest.http")
    error = decode_error_body(capture.status, capture.body, capture.header("content-type"))
    assert capture.status == 400 and error.code == 400
    assert "max_tokens" in error.message and error.type == "BadRequestError"


def test_the_metrics_window_between_two_real_scrapes() -> None:
    """Four 8-token completions of a 4-token prompt were sent between the two scrapes."""
    before = parse_exposition(load_capture("vllm.metrics.before.http").body.decode(), taken_at_s=0.0)
    after = parse_exposition(load_capture("vllm.metrics.http").body.decode(), taken_at_s=5.0)
    warnings: list[str] = []
    stats = window_stats(before, after, warnings=warnings)
    assert warnings == [] and stats is not None and stats.family == "vllm"
    assert stats.requests_finished == 4 and stats.generation_tokens == 32 and stats.prompt_tokens == 16
    assert stats.mean_queue_ms is not None and stats.mean_prefill_ms is not None and stats.mean_decode_ms is not None
    assert stats.mean_decode_ms > stats.mean_prefill_ms  # seven decode steps against one prefill of 4 tokens
