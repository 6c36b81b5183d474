"""TCP across a :class:`~tests.support.netpath.NetworkPath` runs end to end between the two kernels: each side
sees the other's 198.18 address, and the sender's Nagle holding waits for the receiver's own (delayed or quick) ACK
across the delay, which a TCP-terminating proxy would hide by ACKing at once."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from latscope.wire import tcpinfo
from tests.support.netpath import NetworkPath, network_path

DELAY_MS = 20
SEGMENT = 100  #: bytes per server write, well below one MSS: what Nagle holds back


@pytest.mark.parametrize("use_uvloop", [True, False], ids=["uvloop", "asyncio"])
async def test_each_side_sees_the_others_address(use_uvloop: bool) -> None:
    with network_path(DELAY_MS, use_uvloop=use_uvloop) as path:
        assert path.loop_kind == ("uvloop" if use_uvloop else "asyncio")  # uvloop's sockets passed the path's probe
        seen: list[tuple[str, str]] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append((writer.get_extra_info("sockname")[0], writer.get_extra_info("peername")[0]))
            writer.close()

        server = await asyncio.start_server(serve, path.server_host, 0)
        port = server.sockets[0].getsockname()[1]

        async def connect() -> tuple[str, str]:
            # the loop's own create_connection, as the probe of the path does for uvloop's sockets
            reader, writer = await asyncio.open_connection(path.server_host, port)
            addresses = writer.get_extra_info("sockname")[0], writer.get_extra_info("peername")[0]
            await asyncio.wait_for(reader.read(), 5)  # until the server closes
            writer.close()
            return addresses

        try:
            client_side = await path.run(connect())
        finally:
            server.close()
            await server.wait_closed()
    assert client_side == (path.client_host, path.server_host)
    assert seen == [(path.server_host, path.client_host)]


async def _second_segment_gap_ms(path: NetworkPath, *, nodelay: bool, ack_mode: str) -> float:
    """The server writes two ``SEGMENT``-byte segments back to back (``nodelay``: with TCP_NODELAY); return how long
    after the first byte the client had all of them, ms. ``ack_mode``: "delayed" (TCP_QUICKACK 0) or "quick"."""
    loop = asyncio.get_running_loop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setblocking(False)
    listener.bind((path.server_host, 0))
    listener.listen(1)

    async def serve() -> None:
        conn, _ = await loop.sock_accept(listener)
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if nodelay else 0)
            await loop.sock_recv(conn, 16)  # the client's request
            # two send calls, as a server that writes each token separately: the second finds the first unacked
            conn.send(b"a" * SEGMENT)
            conn.send(b"b" * SEGMENT)
            await loop.sock_recv(conn, 16)  # until the client closes

    async def fetch(port: int) -> float:
        client_loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            await client_loop.sock_connect(sock, (path.server_host, port))
            await client_loop.sock_sendall(sock, b"go")
            if ack_mode == "delayed":
                assert tcpinfo.set_delayed_ack(sock)
            else:
                tcpinfo.set_quickack(sock)
            received = await asyncio.wait_for(client_loop.sock_recv(sock, 4096), 5)
            first = time.monotonic_ns()
            while len(received) < 2 * SEGMENT:
                received += await asyncio.wait_for(client_loop.sock_recv(sock, 4096), 5)
            return (time.monotonic_ns() - first) / 1e6

    server = asyncio.ensure_future(serve())
    try:
        return await path.run(fetch(listener.getsockname()[1]))
    finally:
        await asyncio.wait_for(server, 5)
        listener.close()


@pytest.mark.skipif(not tcpinfo.delayed_ack_supported(), reason="needs Linux TCP_QUICKACK")
async def test_nagle_waits_for_the_clients_ack_across_the_path() -> None:
    with network_path(DELAY_MS) as path:
        nagle_delayed = await _second_segment_gap_ms(path, nodelay=False, ack_mode="delayed")
        nagle_quick = await _second_segment_gap_ms(path, nodelay=False, ack_mode="quick")
        nodelay = await _second_segment_gap_ms(path, nodelay=True, ack_mode="delayed")
    rtt = path.rtt_ms
    print(
        f"second segment after: Nagle+delayed ACK {nagle_delayed:.1f} ms, Nagle+quick ACK {nagle_quick:.1f} ms, "
        f"TCP_NODELAY {nodelay:.1f} ms (RTT {rtt} ms)"
    )
    # held until the client's ACK came back: one full RTT at least, so the ACK was the client kernel's own
    assert nagle_quick >= 0.9 * rtt
    # a delayed ACK adds its timer (Linux: at least 40 ms) on top
    assert nagle_delayed >= nagle_quick + 20
    assert nodelay < 0.25 * rtt
