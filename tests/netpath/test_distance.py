"""Across a :class:`~tests.support.netpath.NetworkPath` the configured distance is real: the TCP handshake takes
one round trip, the kernel measures that round trip, and the relay holds every packet for the one-way delay."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
from dataclasses import dataclass

import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.timeline import Timeline
from latscope.wire import Client
from tests.support.netpath import NetworkPath, network_path
from tests.support.stream_server import StreamServer, paced_stream
from tests.wire.conftest import chat_spec


@dataclass(frozen=True)
class Handshake:
    """What one latscope request across a path measured. Times in ms."""

    connect_ms: float
    rtt_ms: float  #: the kernel's smoothed RTT when the response headers arrived
    min_rtt_ms: float  #: the kernel's lowest RTT sample
    local: str | None
    remote: str | None


async def _request(base_url: str) -> Timeline:
    async with Client() as client:
        return await client.request(chat_spec(), base_url, decoder=OpenAIStreamDecoder("chat"))


async def _handshake(path: NetworkPath) -> Handshake:
    async with StreamServer(paced_stream(2), host=path.server_host) as server:
        t = await path.run(_request(server.base_url))
    assert t.ok, t.error
    assert t.connect_start_ns is not None and t.connect_end_ns is not None and t.connection is not None
    info = t.connection.tcp_info_at_headers
    assert info is not None and info.min_rtt_us is not None
    return Handshake(
        connect_ms=(t.connect_end_ns - t.connect_start_ns) / 1e6,
        rtt_ms=info.rtt_us / 1e3,
        min_rtt_ms=info.min_rtt_us / 1e3,
        local=t.connection.local_address,
        remote=t.connection.remote_address,
    )


@pytest.mark.parametrize("delay_ms", [20, 50])
async def test_connect_and_kernel_rtt_take_one_round_trip(delay_ms: float) -> None:
    # the 0 ms control and the far path exist side by side: two paths, two /30s, two relays
    with network_path(0) as near, network_path(delay_ms) as far:
        assert near.server_host != far.server_host
        control = await _handshake(near)
        measured = await _handshake(far)
    rtt = 2 * delay_ms
    print(f"one-way {delay_ms} ms: {measured}; 0 ms control: {control}")
    assert 0.8 * rtt <= measured.connect_ms <= 1.5 * rtt
    assert 0.8 * rtt <= measured.min_rtt_ms <= 1.5 * rtt
    assert 0.8 * rtt <= measured.rtt_ms <= 1.5 * rtt
    # the control: the same client and server without the delay are far below one such round trip
    assert control.connect_ms < 0.5 * rtt
    assert control.min_rtt_ms < 0.25 * rtt


def _udp_echo(sock: socket.socket, stop: threading.Event) -> None:
    """Echo datagrams back (blocking, in a thread, so no event loop adds its own latency)."""
    sock.settimeout(0.1)
    while not stop.is_set():
        try:
            data, peer = sock.recvfrom(2048)
        except TimeoutError:
            continue
        sock.sendto(data, peer)


async def _ping(host: str, port: int, count: int) -> list[float]:
    """Round-trip times of ``count`` sequential UDP pings from the running (namespace) loop, ms."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect((host, port))
        rtts = []
        for i in range(count):
            sent = time.monotonic_ns()
            await loop.sock_sendall(sock, i.to_bytes(4, "big") * 16)
            await asyncio.wait_for(loop.sock_recv(sock, 2048), 5)
            rtts.append((time.monotonic_ns() - sent) / 1e6)
    return rtts


async def test_the_relay_holds_each_packet_for_the_one_way_delay() -> None:
    delay_ms = 20
    with network_path(delay_ms) as path:
        echo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        echo.bind((path.server_host, 0))
        stop = threading.Event()
        thread = threading.Thread(target=_udp_echo, args=(echo, stop), daemon=True)
        thread.start()
        try:
            rtts = await path.run(_ping(path.server_host, echo.getsockname()[1], 20))
        finally:
            stop.set()
            thread.join(5)
            echo.close()
    stats = path.relay_stats
    assert stats is not None
    print(
        f"UDP RTT at {delay_ms} ms one-way: min {min(rtts):.3f} median {statistics.median(rtts):.3f} "
        f"max {max(rtts):.3f} ms; relay lateness {stats}"
    )
    rtt = 2 * delay_ms
    assert min(rtts) >= rtt * 0.999  # the relay never releases a packet early
    assert statistics.median(rtts) < rtt * 1.25
    for direction in stats.values():
        assert direction["dropped"] == 0 and direction["write_errors"] == 0
        assert direction["late_mean_ns"] < 0.1 * delay_ms * 1e6  # sub-millisecond when the machine is not busy
