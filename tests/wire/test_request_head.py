"""What goes on the wire for a request: header sets merged once and reused, the HTTP/1.1 head h11 writes (also when
it is reused from a template), one write for a small request."""

from __future__ import annotations

import re
from collections.abc import Sequence

import h11
import pytest

from latscope.dialects.base import RequestSpec
from latscope.timeline import Timeline
from latscope.wire import Client, Timeouts
from latscope.wire.request import COALESCE_BODY_BYTES, merge_headers
from latscope.wire.transport import WireProtocol
from tests.wire.conftest import chat_spec
from tests.wire.rawserver import DONE, RawConnection, RawServer, event

TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01")
STREAM_RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (
    len(event("a") + DONE),
    event("a") + DONE,
)


class Recorder:
    """A raw server script keeping every request's exact bytes and answering each with a short stream."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []

    async def __call__(self, conn: RawConnection) -> None:
        while (request := await conn.read_request()) is not None:
            self.requests.append(request)
            await conn.send(STREAM_RESPONSE)


async def send_all(
    specs: Sequence[RequestSpec], *, headers: Sequence[tuple[str, str]] = (), **client_args: object
) -> tuple[list[Timeline], list[bytes], int]:
    recorder = Recorder()
    async with RawServer(recorder) as server, Client(timeouts=Timeouts(total_s=10.0), **client_args) as client:  # type: ignore[arg-type]
        timelines = [await client.request(spec, server.base_url, headers=headers) for spec in specs]
        connections = server.connections
    return timelines, recorder.requests, connections


def h11_head(method: str, target: str, fields: list[tuple[str, str]]) -> bytes:
    """What h11 writes for this request line and these fields."""
    head = h11.Connection(h11.CLIENT).send(h11.Request(method=method, target=target, headers=fields))
    assert head is not None
    return head


def sent_fields(request: bytes) -> list[tuple[str, str]]:
    head = request.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    return [(name, value.strip()) for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:])]


@pytest.mark.parametrize("trace_context", [True, False])
async def test_every_request_of_a_repeated_header_set_is_written_as_h11_writes_it(trace_context: bool) -> None:
    timelines, requests, _ = await send_all([chat_spec()] * 4, trace_context=trace_context)
    assert all(t.ok for t in timelines), [t.error for t in timelines]
    for request in requests:  # the first written by h11 itself, the others from the template
        head, body = request.split(b"\r\n\r\n", 1)
        assert head + b"\r\n\r\n" == h11_head("POST", "/v1/chat/completions", sent_fields(request))
        assert body == chat_spec().body
        assert dict((k.lower(), v) for k, v in sent_fields(request))["content-length"] == str(len(body))
    traceparents = [dict(sent_fields(r)).get("traceparent") for r in requests]
    if trace_context:
        assert all(tp is not None and TRACEPARENT.fullmatch(tp) for tp in traceparents)
        assert len(set(traceparents)) == 4  # fresh for every request
        assert [t.trace_id for t in timelines] == [tp.split("-")[1] for tp in traceparents if tp]
        assert [t.request_headers["traceparent"] for t in timelines] == traceparents
    else:
        assert traceparents == [None] * 4 and all(t.trace_id is None for t in timelines)


async def test_the_body_length_is_filled_in_per_request() -> None:
    specs = [
        RequestSpec("POST", "/chat/completions", b"x" * n, [("content-type", "application/json")])
        for n in (3, 3, 17, 0)
    ]
    timelines, requests, _ = await send_all(specs)
    assert [dict(sent_fields(r))["Content-Length"] for r in requests] == ["3", "3", "17", "0"]
    assert [r.split(b"\r\n\r\n", 1)[1] for r in requests] == [s.body for s in specs]
    assert [t.request_headers["content-length"] for t in timelines] == ["3", "3", "17", "0"]


async def test_a_callers_own_traceparent_is_kept_on_every_request() -> None:
    mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    timelines, requests, _ = await send_all([chat_spec()] * 3, headers=[("traceparent", mine)])
    assert [dict(sent_fields(r))["traceparent"] for r in requests] == [mine] * 3
    assert [t.trace_id for t in timelines] == ["0af7651916cd43dd8448eb211c80319c"] * 3


async def test_connection_close_among_the_headers_ends_the_connection_on_every_request() -> None:
    timelines, _, connections = await send_all([chat_spec()] * 3, headers=[("Connection", "close")])
    assert all(t.ok for t in timelines)
    assert connections == 3
    assert all(t.connection is not None and not t.connection.reused for t in timelines)


async def test_a_header_value_that_looks_like_a_placeholder_is_sent_as_given() -> None:
    odd = [
        ("X-Odd", "98765432109876543210"),
        ("X-Trace-Like", "00-5107ba11ce0f1a7e5c09e5107ba11ce0-5107ba11ce0f1a7e-01"),
    ]
    timelines, requests, _ = await send_all([chat_spec()] * 3, headers=odd)
    assert all(t.ok for t in timelines)
    for request in requests:
        fields = dict(sent_fields(request))
        assert fields["X-Odd"] == "98765432109876543210"
        assert fields["Content-Length"] == str(len(chat_spec().body))
        assert request.endswith(chat_spec().body)


async def test_an_invalid_header_fails_every_request_that_carries_it() -> None:
    timelines, requests, _ = await send_all([chat_spec()] * 3, headers=[("X-Bad", "line\r\nbreak")])
    assert requests == []
    for t in timelines:
        assert t.error is not None and t.error.kind == "invalid-request"


async def test_a_small_request_goes_out_in_one_write_and_a_large_body_after_its_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes: list[bytes] = []
    real = WireProtocol.write

    def spy(self: WireProtocol, data: bytes) -> None:
        writes.append(data)
        real(self, data)

    monkeypatch.setattr(WireProtocol, "write", spy)
    large = RequestSpec("POST", "/chat/completions", b"y" * (COALESCE_BODY_BYTES + 1), [])
    timelines, requests, _ = await send_all([chat_spec(), chat_spec(), large, large])
    assert all(t.ok for t in timelines)
    small_body = chat_spec().body
    assert len(writes) == 2 + 2 * 2
    assert writes[0].endswith(small_body) and writes[1].endswith(small_body)  # head and body together
    assert writes[3] == writes[5] == large.body  # the large body written on its own, after the head
    assert requests[2].endswith(large.body) and requests[3].endswith(large.body)
    for t in timelines:
        assert t.send_start_ns is not None and t.headers_sent_ns is not None and t.send_end_ns is not None
        assert t.send_start_ns <= t.headers_sent_ns <= t.send_end_ns


def test_a_header_set_merges_names_case_insensitively_and_later_sources_win() -> None:
    hs = merge_headers(
        ("Host", "example:8000"),
        "latscope/test",
        ([("Content-Type", "application/json"), ("X-A", "1")], [("x-a", "2"), ("Transfer-Encoding", "chunked")]),
        with_length=True,
        trace_context=True,
    )
    t = Timeline()
    fields = hs.fill(12, t)
    names = [name for name, _ in fields]
    assert names == ["Host", "User-Agent", "Content-Type", "x-a", "Content-Length", "traceparent"]
    assert dict(fields)["x-a"] == "2" and dict(fields)["Content-Length"] == "12"
    assert t.trace_id is not None and dict(fields)["traceparent"].split("-")[1] == t.trace_id
    assert t.request_headers["content-length"] == "12" and "transfer-encoding" not in t.request_headers
    assert hs.fields[hs.length_at or 0] == ("Content-Length", "0")  # the set itself is not changed by a request
