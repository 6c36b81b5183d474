"""HTTP/2 connection endings: GOAWAY (RFC 9113 §6.8) retires the connection, answers the streams it covers, and
fails only the streams above its last stream id, which the server never processed."""

from __future__ import annotations

import asyncio
import ssl
import time

import h2.config
import h2.connection
import h2.events
import orjson
import pytest
from hyperframe.frame import GoAwayFrame

from latscope.timeline import EventKind, Phase, Timeline
from latscope.timeline.model import ConnectionInfo
from latscope.wire import Client, WireError
from latscope.wire.exchange import Exchange
from latscope.wire.http2 import HTTP2Connection
from latscope.wire.models import Origin
from latscope.wire.request import Outgoing
from tests.support.stream_server import SSE_HEADERS, Received, Reply, StreamServer, chat_chunk
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec


def goaway(last_stream_id: int) -> bytes:
    """A GOAWAY frame (NO_ERROR) naming ``last_stream_id``, serialised by hyperframe (h2's own framing layer)."""
    return GoAwayFrame(0, last_stream_id=last_stream_id).serialize()


def stream_of(reply: Reply) -> int:
    """The stream id of an HTTP/2 reply (the test server's HTTP/2 reply object carries it)."""
    stream_id: int = vars(reply)["stream_id"]
    return stream_id


async def answer(reply: Reply) -> None:
    await reply.start(200, SSE_HEADERS)
    await reply.send_event(chat_chunk("a"))
    await reply.send_event(chat_chunk("b"))
    await reply.send(b"data: [DONE]\n\n")
    await reply.end()


@pytest.fixture
def h2_context(pki: LocalPKI) -> ssl.SSLContext:
    return pki.server_context(alpn=("h2", "http/1.1"))


async def test_a_goaway_naming_the_stream_before_its_answer_lets_the_answer_through(
    pki: LocalPKI, h2_context: ssl.SSLContext
) -> None:
    # What nginx does with keep-alive off: GOAWAY (last stream = this request's), then the response, then the close.
    async def goaway_first(request: Received, reply: Reply) -> None:
        reply.writer.write(goaway(stream_of(reply)))
        await answer(reply)

    async with (
        StreamServer(goaway_first, ssl_context=h2_context) as server,
        Client(ca_file=pki.ca_file) as client,
    ):
        first = await client.request(chat_spec(), server.base_url)
        second = await client.request(chat_spec(), server.base_url)
        connections = server.connections
    for t in (first, second):
        assert t.ok, t.error
        assert t.connection is not None and t.connection.http_version == "HTTP/2"
        assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.CONTENT, EventKind.DONE]
    # the GOAWAY retired the first connection: the second request opened its own
    assert second.connection is not None and not second.connection.reused
    assert connections == 2


async def test_frames_after_a_goaway_in_the_same_read_are_processed(pki: LocalPKI, h2_context: ssl.SSLContext) -> None:
    async def goaway_and_answer_at_once(request: Received, reply: Reply) -> None:
        # the GOAWAY and the whole response framed by the server's h2 connection go out in one write: one read
        stream_id = stream_of(reply)
        conn = vars(reply)["session"].conn
        conn.send_headers(stream_id, [(":status", "200"), *SSE_HEADERS])
        events = b"data: " + orjson.dumps(chat_chunk("a")) + b"\n\ndata: " + orjson.dumps(chat_chunk("b"))
        conn.send_data(stream_id, events + b"\n\ndata: [DONE]\n\n", end_stream=True)
        reply.writer.write(goaway(stream_id) + conn.data_to_send())
        await reply.writer.drain()

    async with (
        StreamServer(goaway_and_answer_at_once, ssl_context=h2_context) as server,
        Client(ca_file=pki.ca_file) as client,
    ):
        t = await client.request(chat_spec(), server.base_url)
    assert t.ok, t.error
    assert [e.kind for e in t.events] == [EventKind.CONTENT, EventKind.CONTENT, EventKind.DONE]
    assert len({e.read_index for e in t.events}) == 1  # everything, GOAWAY included, came in one read


async def test_a_goaway_fails_only_the_streams_above_its_last_stream_id(
    pki: LocalPKI, h2_context: ssl.SSLContext
) -> None:
    second_arrived = asyncio.Event()

    async def covers_the_first_only(request: Received, reply: Reply) -> None:
        if stream_of(reply) == 1:
            await second_arrived.wait()  # both requests are in: stream 3 is now one the server will not process
            reply.writer.write(goaway(1))
            await answer(reply)
        else:
            second_arrived.set()
            await asyncio.sleep(30)  # never answered (cancelled when the server stops)

    async with (
        StreamServer(covers_the_first_only, ssl_context=h2_context) as server,
        Client(ca_file=pki.ca_file) as client,
    ):
        first, second = await asyncio.wait_for(
            asyncio.gather(client.request(chat_spec(), server.base_url), client.request(chat_spec(), server.base_url)),
            10,
        )
        connections = server.connections
    assert connections == 1
    assert first.ok, first.error
    assert [e.kind for e in first.events][-1] is EventKind.DONE
    assert second.error is not None
    assert (second.error.phase, second.error.kind) == (Phase.HEADERS, "goaway")
    assert "safe to retry" in second.error.message and "last stream 1" in second.error.message


class RecordingProtocol:
    """Stands in for the socket side of a connection: keeps what the client writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.usable = True
        self.write_pending = False
        self.sock = None

    def attach(self, receiver: object) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True
        self.usable = False


async def test_a_request_handed_a_connection_that_got_goaway_since_fails_unsent() -> None:
    protocol = RecordingProtocol()
    conn = HTTP2Connection(Origin("https", "localhost", 443), protocol, ConnectionInfo(1, False))  # type: ignore[arg-type]
    conn.reserve()  # the pool handed it out ...
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.initiate_connection()
    server.receive_data(bytes(protocol.written))
    server.close_connection(last_stream_id=0)
    conn.data_received(server.data_to_send(), time.monotonic_ns())  # ... and then the server said GOAWAY
    sent_before = len(protocol.written)
    with pytest.raises(WireError) as caught:
        await conn.send(
            Outgoing("POST", "/v1/chat/completions", [], b"{}"), Exchange(Timeline(), decoder=None, streamed=False), 1.0
        )
    assert (caught.value.phase, caught.value.kind) == (Phase.SEND, "goaway")
    assert "safe to retry" in caught.value.message
    assert not conn.usable and protocol.closed
    after = server.receive_data(bytes(protocol.written[sent_before:]))
    assert not any(isinstance(e, h2.events.RequestReceived) for e in after)  # no request went out


@pytest.mark.parametrize("size", [100, 64 * 1024 + 1, 300_000])
async def test_a_request_body_of_any_size_arrives_whole(pki: LocalPKI, h2_context: ssl.SSLContext, size: int) -> None:
    # 300,000 bytes is more than the server's initial flow-control window (65,535): the client waits for its updates
    body = orjson.dumps({"stream": True, "pad": "x" * size})

    async def echo_length(request: Received, reply: Reply) -> None:
        await reply.start(200, SSE_HEADERS)
        await reply.send_event(chat_chunk(str(len(request.body))))
        await reply.send(b"data: [DONE]\n\n")
        await reply.end()

    spec = chat_spec()
    async with (
        StreamServer(echo_length, ssl_context=h2_context) as server,
        Client(ca_file=pki.ca_file) as client,
    ):
        big = type(spec)(spec.method, spec.path, body, spec.headers, spec.dialect, spec.model)
        t = await client.request(big, server.base_url)
        received = server.requests[0]
    assert t.ok, t.error
    assert received.http_version == "HTTP/2" and received.body == body
    assert t.send_start_ns is not None and t.headers_sent_ns is not None and t.send_end_ns is not None
    assert t.send_start_ns <= t.headers_sent_ns <= t.send_end_ns
