"""Timelines → spans, the pure part: structure, exact durations, ids, errors, attributes, bench rows."""

from __future__ import annotations

import itertools
import time

from latscope.export.otlp import measure_clock_offset
from latscope.export.spans import Span, request_context, row_spans, timeline_spans
from latscope.runs.records import RequestContext, build_tables
from latscope.timeline.model import (
    ConnectionInfo,
    ErrorKind,
    EventKind,
    Phase,
    Read,
    RequestError,
    ServerMeasure,
    StreamEvent,
    Timeline,
    Usage,
)
from latscope.timeline.redact import register_secret

OFFSET = 1_700_000_000_000_000_000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def _streamed(*, started: int = 1_000_000) -> Timeline:
    """A new connection's streamed request with uneven gaps between its marks (ns)."""
    t = Timeline(url="http://llm.example:8000/v1/chat/completions", dialect="openai.chat", model="m", max_tokens=3)
    t.trace_id, t.span_id = TRACE, SPAN
    t.request_headers = {"traceparent": f"00-{TRACE}-{SPAN}-01", "authorization": "[redacted]"}
    t.started_ns = started
    t.dns_start_ns, t.dns_end_ns = started + 1_003, started + 51_007
    t.connect_start_ns, t.connect_end_ns = started + 52_011, started + 181_013
    t.connection_ready_ns = started + 183_017
    t.send_start_ns, t.send_end_ns = started + 190_019, started + 230_023
    t.first_byte_ns = t.headers_received_ns = started + 5_230_029
    t.first_token_ns = started + 9_000_031
    t.last_token_ns = started + 29_000_037
    t.ended_ns = started + 29_100_041
    t.reads = [Read(t.first_token_ns, 100), Read(started + 19_000_000, 100), Read(t.last_token_ns, 100)]
    t.events = [
        StreamEvent(t.first_token_ns, 0, EventKind.CONTENT, 3, 1, None),
        StreamEvent(started + 19_000_000, 1, EventKind.CONTENT, 3, 1, None),
        StreamEvent(t.last_token_ns, 2, EventKind.CONTENT, 3, 1, None),
    ]
    t.status = 200
    t.finish_reason = "length"
    t.usage = Usage(prompt_tokens=12, completion_tokens=3)
    t.connection = ConnectionInfo(1, reused=False, remote_address="10.0.0.7", remote_port=8000, http_version="HTTP/1.1")
    t.server = [ServerMeasure("queue", 1.5, "header:server-timing:queue")]
    return t


def _children(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.parent_span_id == spans[0].span_id]


def test_the_request_span_is_the_traceparent_sent_and_its_phases_partition_it_exactly() -> None:
    t = _streamed()
    spans = timeline_spans(t, clock_offset_ns=OFFSET)
    root, children = spans[0], _children(spans)
    assert (root.trace_id, root.span_id, root.parent_span_id, root.kind) == (TRACE, SPAN, None, "client")
    assert (root.start_ns, root.end_ns) == (t.started_ns + OFFSET, t.ended_ns + OFFSET)  # type: ignore[operator]
    assert [c.name for c in children] == ["pool", "dns", "connect", "send", "wait", "first token", "stream"]
    assert sum(c.duration_ns for c in children) == root.duration_ns  # exact, in ns
    assert children[0].start_ns == root.start_ns and children[-1].end_ns == root.end_ns
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(children))
    assert {c.trace_id for c in children} == {TRACE} and len({c.span_id for c in spans}) == len(spans)
    assert children[3].duration_ns == t.send_end_ns - t.send_start_ns  # type: ignore[operator]
    assert children[1].attributes["latscope.phase_ms"] == (t.dns_end_ns - t.dns_start_ns) / 1e6  # type: ignore[operator]


def test_the_request_span_carries_genai_and_latscope_attributes() -> None:
    a = timeline_spans(_streamed(), clock_offset_ns=0)[0].attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "m" and a["gen_ai.request.max_tokens"] == 3
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 3)
    assert a["gen_ai.response.finish_reasons"] == ("length",)
    assert (a["server.address"], a["server.port"]) == ("llm.example", 8000)
    assert (a["network.peer.address"], a["network.protocol.version"]) == ("10.0.0.7", "1.1")
    assert a["latscope.ttft_ms"] == 9.000031 and a["latscope.e2e_ms"] == 29.100041
    assert a["latscope.tpot_ms"] == (29_000_037 - 9_000_031) / 1e6 / 2
    assert a["latscope.server.queue_ms"] == 1.5 and a["latscope.connection.reused"] is False
    assert "error.type" not in a


def test_a_traceparent_the_caller_set_makes_the_request_span_its_child() -> None:
    t = _streamed()
    t.span_id = None  # the caller's header: its parent-id is the caller's span
    trace_id, span_id, parent = request_context(t)
    assert (trace_id, parent) == (TRACE, SPAN) and span_id != SPAN and len(span_id) == 16


def test_without_trace_context_the_ids_are_derived_from_the_request() -> None:
    t = _streamed()
    t.trace_id = t.span_id = None
    t.request_headers = {}
    first, again = request_context(t), request_context(t)
    assert first == again and len(first[0]) == 32 and int(first[0], 16) and first[2] is None
    t.started_ns += 1
    assert request_context(t)[0] != first[0]


def test_a_failure_is_status_error_on_the_request_and_the_phase_it_ended_in() -> None:
    t = Timeline(url="https://llm.example/v1/chat/completions?api_key=[redacted]", dialect="openai.chat")
    t.trace_id, t.span_id = TRACE, SPAN
    t.started_ns = 10
    t.dns_start_ns, t.dns_end_ns = 20, 1_000
    t.connect_start_ns = 1_010
    t.error = RequestError(Phase.CONNECT, ErrorKind.REFUSED, "TCP connect to 10.0.0.1:443 failed: refused", 5_000)
    spans = timeline_spans(t, clock_offset_ns=0)
    root, children = spans[0], _children(spans)
    assert root.error == "connect: TCP connect to 10.0.0.1:443 failed: refused"
    assert root.end_ns == 5_000 and [c.name for c in children] == ["pool", "dns", "connect"]
    assert [c.error for c in children] == [None, None, root.error]
    assert root.attributes["error.type"] == "refused" and root.attributes["latscope.error.phase"] == "connect"
    assert sum(c.duration_ns for c in children) == root.duration_ns


def test_a_stale_connection_retry_is_an_event_on_the_request_span() -> None:
    t = _streamed()
    t.stale_retry_error = RequestError(Phase.HEADERS, ErrorKind.CLOSED, "the server closed the connection", 999_000)
    root = timeline_spans(t, clock_offset_ns=OFFSET)[0]
    assert [(e.name, e.at_ns) for e in root.events] == [("latscope.stale_retry", 999_000 + OFFSET)]
    assert root.attributes["latscope.stale_retry"] is True


def test_a_bench_row_gives_the_same_request_and_phase_durations_as_its_timeline() -> None:
    t = _streamed(started=123_456_789_012_345)
    ctx = RequestContext(step=0, request_id=7, worker=0, class_name="default", warmup=False, step_start_ns=0)
    requests, _ = build_tables([(t, ctx)])
    row = requests.to_pylist()[0]
    from_row = row_spans(row, url=t.url, model="m", dialect="openai.chat", clock_offset_ns=OFFSET)
    direct = timeline_spans(t, clock_offset_ns=OFFSET)
    assert (from_row[0].trace_id, from_row[0].span_id) == (TRACE, SPAN)
    assert (from_row[0].start_ns, from_row[0].end_ns) == (direct[0].start_ns, direct[0].end_ns)
    later = ("send", "wait", "first token", "stream")
    assert [(s.name, s.duration_ns) for s in _children(from_row) if s.name in later] == [
        (s.name, s.duration_ns) for s in _children(direct) if s.name in later
    ]
    assert sum(c.duration_ns for c in _children(from_row)) == from_row[0].duration_ns
    a = from_row[0].attributes
    assert a["gen_ai.usage.output_tokens"] == 3 and a["gen_ai.request.max_tokens"] == 3
    assert a["latscope.bench.request_id"] == 7 and a["latscope.itl_count"] == 2


def test_a_key_in_the_url_never_reaches_a_span() -> None:
    t = _streamed()
    t.url = "https://llm.example/v1/chat/completions?api_key=sk-live-abcdef"
    t.error = RequestError(Phase.STREAM, ErrorKind.API_ERROR, "upstream said: bad key sk-live-abcdef", t.ended_ns or 0)
    register_secret("sk-live-abcdef")  # as the client registers a key it sends (the conftest forgets it after)
    spans = timeline_spans(t, clock_offset_ns=0)
    assert "sk-live-abcdef" not in repr(spans)
    assert spans[0].attributes["server.address"] == "llm.example" and spans[0].attributes["server.port"] == 443


def test_the_clock_offset_places_monotonic_marks_on_the_wall_clock() -> None:
    offset = measure_clock_offset()
    assert 0 < offset.uncertainty_ns < 1_000_000  # two back-to-back clock reads, not a scheduling gap
    wall = time.monotonic_ns() + offset.offset_ns
    assert abs(wall - time.time_ns()) < 5_000_000


def test_the_servers_own_span_becomes_its_phases_under_the_request_span_one_after_another() -> None:
    t = _streamed()
    server_start = OFFSET + 2_000_000
    t.server_fields["server_span"] = {"name": "llm_request", "start_ns": server_start, "end_ns": server_start + 9}
    t.server += [
        ServerMeasure("ingest", 0.5, "span:gen_ai.latency.time_to_first_token-time_in_queue-time_in_model_prefill"),
        ServerMeasure("queue", 1.25, "span:gen_ai.latency.time_in_queue"),
        ServerMeasure("prefill", 2.0, "span:gen_ai.latency.time_in_model_prefill"),
        ServerMeasure("decode", 19.5, "span:gen_ai.latency.time_in_model_decode"),
    ]
    spans = timeline_spans(t, clock_offset_ns=OFFSET)
    server = [s for s in _children(spans) if s.name.startswith("server ")]
    assert [s.name for s in server] == ["server ingest", "server queue", "server prefill", "server decode"]
    assert server[0].start_ns == server_start  # placed by the server's clock, not the client's offset
    assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(server))
    assert [s.duration_ns for s in server] == [500_000, 1_250_000, 2_000_000, 19_500_000]
    assert {s.attributes["latscope.clock"] for s in server} == {"server"}
    # the server-timing queue of the fixture is not the server span's: only span measures are placed
    assert server[1].attributes["latscope.source"] == "span:gen_ai.latency.time_in_queue"
    # the client's phases still partition the request span exactly
    client = [s for s in _children(spans) if not s.name.startswith("server ")]
    assert sum(s.duration_ns for s in client) == spans[0].duration_ns


def test_a_server_chain_is_placed_only_as_far_as_the_server_measured_it() -> None:
    t = _streamed()
    t.server_fields["server_span"] = {"start_ns": OFFSET}
    t.server += [ServerMeasure("queue", 1.0, "span:gen_ai.latency.time_in_queue")]  # no ingest: nothing to anchor
    assert not [s for s in timeline_spans(t, clock_offset_ns=OFFSET) if s.name.startswith("server ")]
