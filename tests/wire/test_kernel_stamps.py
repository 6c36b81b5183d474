"""Kernel receive stamps: every read of a kernel-stamped connection carries the kernel's stamp and its own
user-space stamp, over plain TCP, TLS and HTTP/2, with no silent fallback to user-space stamps."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time

import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import StampSource, Timeline, dumps, loads, metrics
from latscope.wire import Client
from latscope.wire.kstamps import (
    CLOCK,
    SCM_TIMESTAMPNS,
    SO_TIMESTAMPNS,
    ClockOffset,
    kernel_stamps_supported,
    measure_offset,
    realtime_ns,
)
from tests.support.stream_server import StreamServer, paced_stream
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec

linux_only = pytest.mark.skipif(not kernel_stamps_supported(), reason="kernel receive stamps need 64-bit Linux")
# every case with the compiled reader and with the Python one (tests/wire/conftest.py)
pytestmark = pytest.mark.usefixtures("read_path")


def assert_kernel_stamped(t: Timeline) -> None:
    """Every read has a kernel stamp, no later than the user-space stamp of the same read, and the events use it."""
    assert t.ok, t.error
    assert t.connection is not None and t.connection.stamps == "kernel"
    assert not t.connection.kernel_stamps_refused
    assert t.reads
    sources = {r.source for r in t.reads}
    assert sources == {StampSource.KERNEL}, f"reads fell back to user-space stamps: {t.reads}"
    for r in t.reads:
        assert r.user_ns is not None and r.at_ns <= r.user_ns, r
        # a kernel stamp is taken on this machine moments before the read: not seconds away
        assert r.user_ns - r.at_ns < 1_000_000_000, r
    for e in t.events:
        assert e.at_ns == t.reads[e.read_index].at_ns
    assert t.first_byte_ns == t.reads[0].at_ns


# --- the pure parts -----------------------------------------------------------------------------------------------


def test_a_timestamp_control_message_is_read_as_realtime_ns() -> None:
    raw = struct.pack("=qq", 1_700_000_000, 123_456_789)
    assert realtime_ns([(socket.SOL_SOCKET, SCM_TIMESTAMPNS, raw)]) == 1_700_000_000_123_456_789


def test_other_control_messages_give_no_stamp() -> None:
    assert realtime_ns([]) is None
    assert realtime_ns([(socket.IPPROTO_TCP, SCM_TIMESTAMPNS, b"\0" * 16)]) is None


def test_the_clock_offset_is_realtime_minus_monotonic_within_its_uncertainty() -> None:
    before = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
    offset, gap = measure_offset()
    after = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
    assert gap >= 0
    assert min(before, after) - 1_000_000 <= offset <= max(before, after) + 1_000_000


def test_the_offset_report_records_first_last_and_drift() -> None:
    clock = ClockOffset()
    assert clock.report() is None
    now = time.monotonic_ns()
    real = time.clock_gettime_ns(time.CLOCK_REALTIME)
    mono = clock.to_monotonic(real, now)
    assert abs(mono - now) < 5_000_000
    clock.refresh(now + 2_000_000_000)
    report = clock.report()
    assert report is not None
    assert report.measurements == 2
    assert report.drift_ns == report.last_offset_ns - report.first_offset_ns
    assert report.span_ns == 2_000_000_000
    assert set(report.to_dict()) >= {"first_offset_ns", "last_offset_ns", "drift_ns", "uncertainty_ns"}


def test_kernel_stamped_reads_survive_the_json_round_trip() -> None:
    from latscope.timeline.model import Read

    t = Timeline(url="http://x/")
    t.reads = [Read(10, 5, 12), Read(20, 5)]
    back = loads(dumps(t))
    assert back.reads == t.reads
    assert [r.source for r in back.reads] == [StampSource.KERNEL, StampSource.USER]
    assert metrics.read_delays_ms(back) == [2e-6]
    plain = Timeline(url="http://x/", reads=[Read(1, 1)])
    assert "read_user_ns" not in __import__("orjson").loads(dumps(plain))


def test_an_unknown_stamp_source_is_refused() -> None:
    with pytest.raises(ValueError, match="stamps"):
        Client(stamps="tsc")


# --- against servers on loopback -----------------------------------------------------------------------------------


@linux_only
async def test_every_read_of_a_plain_http1_stream_carries_a_kernel_stamp() -> None:
    async with StreamServer(paced_stream(20, 0.002)) as server, Client(stamps="kernel") as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert_kernel_stamped(t)
    assert len(t.events) >= 20
    summary = metrics.summary(t)
    assert summary["stamps"] == "kernel"
    assert summary["read_delay_p99_ms"] is not None and summary["read_delay_p99_ms"] >= 0


@linux_only
async def test_a_reused_connection_keeps_its_kernel_stamps() -> None:
    async with StreamServer(paced_stream(5, 0.001)) as server, Client(stamps="kernel") as client:
        await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.connection is not None and t.connection.reused
    assert_kernel_stamped(t)


@linux_only
async def test_tls_reads_carry_kernel_stamps(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("http/1.1",))
    async with (
        StreamServer(paced_stream(20, 0.002), ssl_context=ctx) as server,
        Client(ca_file=pki.ca_file, stamps="kernel") as client,
    ):
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.connection is not None and t.connection.http_version == "HTTP/1.1" and t.connection.tls_version
    assert_kernel_stamped(t)


@linux_only
async def test_http2_reads_carry_kernel_stamps(pki: LocalPKI) -> None:
    ctx = pki.server_context(alpn=("h2", "http/1.1"))
    async with (
        StreamServer(paced_stream(20, 0.002), ssl_context=ctx) as server,
        Client(ca_file=pki.ca_file, stamps="kernel") as client,
    ):
        both = await asyncio.gather(
            *(client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat")) for _ in range(2))
        )
    for t in both:
        assert t.connection is not None and t.connection.http_version == "HTTP/2"
        assert_kernel_stamped(t)


@linux_only
async def test_a_tls_record_split_across_reads_keeps_the_kernel_stamp_of_the_completing_read(pki: LocalPKI) -> None:
    # a raw TLS server that writes each record in two TCP segments 5 ms apart
    server_ctx = pki.server_context(alpn=("http/1.1",))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = server_ctx.wrap_bio(incoming, outgoing, server_side=True)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    halves_ns: list[int] = []

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        conn, _ = await loop.sock_accept(listener)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:  # handshake
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    await loop.sock_sendall(conn, outgoing.read())
                incoming.write(await loop.sock_recv(conn, 65536))
        if outgoing.pending:
            await loop.sock_sendall(conn, outgoing.read())
        request = b""
        while True:
            try:
                while True:  # every record already in (the client's Finished and its request come together)
                    request += tls.read(65536)
            except ssl.SSLWantReadError:
                pass
            if outgoing.pending:
                await loop.sock_sendall(conn, outgoing.read())
            if b"\r\n\r\n" in request and request.endswith(b"}"):
                break
            incoming.write(await loop.sock_recv(conn, 65536))
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        tls.write(head)
        await loop.sock_sendall(conn, outgoing.read())
        for i in range(4):
            tls.write(b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i)
            record = outgoing.read()
            await loop.sock_sendall(conn, record[:10])
            await asyncio.sleep(0.005)
            halves_ns.append(time.monotonic_ns())
            await loop.sock_sendall(conn, record[10:])
            await asyncio.sleep(0.005)
        tls.write(b"data: [DONE]\n\n")
        await loop.sock_sendall(conn, outgoing.read())
        conn.close()

    task = asyncio.ensure_future(serve())
    try:
        async with Client(ca_file=pki.ca_file, stamps="kernel") as client:
            t = await client.request(chat_spec(), f"https://localhost:{port}", decoder=OpenAIStreamDecoder("chat"))
        await task
    finally:
        listener.close()
    assert_kernel_stamped(t)
    content = [e for e in t.events if e.tokens]
    assert len(content) == 4
    for event, second_half_ns in zip(content, halves_ns, strict=True):
        # stamped by the read that completed the record (its second half), not the first half's
        assert event.at_ns >= second_half_ns
        assert event.at_ns - second_half_ns < 4_000_000


@linux_only
async def test_the_offset_is_measured_when_stamps_are_converted() -> None:
    CLOCK.reset()
    async with StreamServer(paced_stream(2)) as server, Client(stamps="kernel") as client:
        await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    report = CLOCK.report()
    assert report is not None and report.measurements >= 1


async def test_user_stamps_stay_the_default_path_with_no_kernel_stamps() -> None:
    async with StreamServer(paced_stream(3)) as server, Client(stamps="user") as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok, t.error
    assert t.connection is not None and t.connection.stamps == "user"
    assert not t.connection.kernel_stamps_refused
    assert {r.source for r in t.reads} == {StampSource.USER}


async def test_a_platform_without_kernel_stamps_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import latscope.wire.connection as connection

    monkeypatch.setattr(connection, "enable_kernel_stamps", lambda sock: False)
    async with StreamServer(paced_stream(3)) as server, Client(stamps="kernel") as client:
        t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
    assert t.ok, t.error
    assert t.connection is not None
    assert t.connection.stamps == "user" and t.connection.kernel_stamps_refused
    assert {r.source for r in t.reads} == {StampSource.USER}


@linux_only
def test_so_timestampns_is_the_option_the_kernel_knows() -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        assert sock.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS) == 1


@linux_only
def test_arming_waits_until_the_kernel_stamps_packets() -> None:
    from latscope.wire.kstamps import arm

    assert arm()


def test_the_waterfall_s_cadence_line_shows_the_measured_read_delay() -> None:
    from latscope.report.waterfall import token_cadence
    from latscope.timeline.model import Read

    t = Timeline(url="http://x/", reads=[Read(1_000_000, 10, 1_100_000), Read(2_000_000, 10, 2_300_000)])
    line = token_cadence(t).plain
    assert "kernel stamps, client read delay p50 0.200 / p99 0.298 ms" in line
    assert "kernel stamps" not in token_cadence(Timeline(url="http://x/", reads=[Read(1, 1)])).plain


class _Recorder:
    """Stands in for the WireProtocol: records what the reader delivers."""

    def __init__(self) -> None:
        self.reads: list[tuple[bytes, int, int | None]] = []

    def connection_made(self, transport: object) -> None:
        pass

    def stamped_data_received(self, data: bytes, at_ns: int, user_ns: int | None) -> None:
        self.reads.append((data, at_ns, user_ns))

    def connection_lost(self, exc: BaseException | None) -> None:
        pass


def _timespec_message(realtime_ns: int) -> list[tuple[int, int, bytes]]:
    sec, nsec = divmod(realtime_ns, 1_000_000_000)
    return [(socket.SOL_SOCKET, SCM_TIMESTAMPNS, struct.pack("=qq", sec, nsec))]


async def test_a_kernel_stamp_later_than_its_read_is_not_used_and_the_read_counts_as_unstamped() -> None:
    from latscope.wire.rawsock import StampedSocket

    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        recorder = _Recorder()
        raw = StampedSocket(asyncio.get_running_loop(), a, recorder)  # type: ignore[arg-type]
        now_real = time.clock_gettime_ns(time.CLOCK_REALTIME)
        replies = [
            (b"early", _timespec_message(now_real - 1_000_000), 0, None),  # 1 ms ago: a kernel stamp
            (b"future", _timespec_message(now_real + 10_000_000_000), 0, None),  # 10 s ahead: impossible
            (b"bare", [], 0, None),  # no control message at all
        ]
        raw._recvmsg = lambda size, ancsize: replies.pop(0)
        for _ in range(3):
            raw._on_readable()
        raw.abort()
        await asyncio.sleep(0)  # the abort's connection_lost
    (d1, at1, user1), (d2, _, user2), (d3, _, user3) = recorder.reads
    assert d1 == b"early" and user1 is not None and 0 <= user1 - at1 < 100_000_000
    assert d2 == b"future" and user2 is None  # kept with its user-space stamp alone
    assert d3 == b"bare" and user3 is None
    assert raw.unstamped_reads == 2
