"""Every read is stamped in data_received: the gap between the server's send stamp and the client's read stamp stays
small next to the pacing interval, on asyncio and on uvloop."""

from __future__ import annotations

import statistics

from latscope import wire
from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import EventKind, Timeline, metrics
from latscope.wire import Client
from tests.support.stream_server import StreamServer, paced_stream
from tests.wire.conftest import chat_spec

EVENTS = 200
INTERVAL_S = 0.002


def _delays_ns(t: Timeline) -> list[int]:
    return [e.at_ns - e.server_sent_ns for e in t.events if e.server_sent_ns is not None]


def _check_paced(t: Timeline) -> None:
    assert t.ok, t.error
    content = [e for e in t.events if e.kind is EventKind.CONTENT]
    assert len(content) == EVENTS
    delays = sorted(_delays_ns(t))
    assert len(delays) == len(t.events) - 1  # every event but [DONE] carries the server's stamp
    assert min(delays) >= 0  # one clock on both sides: a read never precedes its send
    p50 = statistics.median(delays)
    p99 = delays[int(len(delays) * 0.99) - 1]
    interval_ns = INTERVAL_S * 1e9
    # generous: the added delay is a fraction of the interval, even on a loaded 2-core machine
    assert p50 < 0.5 * interval_ns, p50
    assert p99 < 2.5 * interval_ns, p99
    # the recorded cadence follows the server's: mean gap within a factor of the pacing interval
    gaps = metrics.itl_ms(t)
    assert 0.5 * INTERVAL_S * 1e3 < statistics.mean(gaps) < 5 * INTERVAL_S * 1e3


async def _paced_request() -> Timeline:
    async with StreamServer(paced_stream(EVENTS, INTERVAL_S)) as server, Client() as client:
        return await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))


async def test_read_stamps_follow_the_servers_send_stamps() -> None:
    _check_paced(await _paced_request())


def test_read_stamps_follow_the_servers_send_stamps_on_uvloop() -> None:
    assert wire.loop.uvloop_available()
    _check_paced(wire.run(_paced_request()))


async def test_each_event_points_at_the_read_that_completed_it() -> None:
    t = await _paced_request()
    for event in t.events:
        assert t.reads[event.read_index].at_ns == event.at_ns
    assert t.first_token_ns == next(e.at_ns for e in t.events if e.kind is EventKind.CONTENT)
    assert t.last_token_ns == [e.at_ns for e in t.events if e.kind is EventKind.CONTENT][-1]
    assert t.usage is not None and t.usage.completion_tokens == EVENTS
    assert t.finish_reason == "stop"
    assert sum(r.nbytes for r in t.reads) > t.response_body_bytes > 0  # reads include the chunked framing


async def test_marks_are_in_request_order() -> None:
    t = await _paced_request()
    marks = [
        t.started_ns,
        t.connect_start_ns,
        t.connect_end_ns,
        t.connection_ready_ns,
        t.send_start_ns,
        t.headers_sent_ns,
        t.send_end_ns,
        t.first_byte_ns,
        t.headers_received_ns,
        t.first_token_ns,
        t.last_token_ns,
        t.ended_ns,
    ]
    assert all(m is not None for m in marks), marks
    assert marks == sorted(marks)  # type: ignore[type-var]
    assert t.dns_start_ns is None  # an IP literal needs no DNS
    assert t.tls_start_ns is None  # plain http
