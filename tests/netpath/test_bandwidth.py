"""A rate-limited :class:`~tests.support.netpath.NetworkPath` behaves like a bottleneck link: a bulk transfer takes
about size×8/rate, and much longer than the same transfer over the unlimited path."""

from __future__ import annotations

import asyncio
import socket
import time

from tests.support.netpath import NetworkPath, network_path

UPLOAD_BYTES = 2_000_000
DELAY_MS = 20
RATE_MBIT = 20.0


async def _upload_seconds(path: NetworkPath, size: int) -> float:
    """Send ``size`` bytes from the client namespace to a server on ``path.server_host`` and return the seconds from
    the first byte sent to the server's acknowledgement of the last one (one extra one-way delay)."""
    done = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = 0
        while received < size:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            received += len(chunk)
        writer.write(b"ok")
        await writer.drain()
        writer.close()
        done.set_result(received)

    server = await asyncio.start_server(serve, path.server_host, 0)
    port = server.sockets[0].getsockname()[1]

    async def upload() -> float:
        loop = asyncio.get_running_loop()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            await loop.sock_connect(sock, (path.server_host, port))
            start = time.monotonic_ns()
            await loop.sock_sendall(sock, b"x" * size)
            reply = await asyncio.wait_for(loop.sock_recv(sock, 16), 30)
            assert reply == b"ok"
            return (time.monotonic_ns() - start) / 1e9

    try:
        seconds = await path.run(upload())
        assert await asyncio.wait_for(done, 5) == size
    finally:
        server.close()
        await server.wait_closed()
    return seconds


async def test_an_upload_takes_size_over_rate() -> None:
    with network_path(DELAY_MS) as free:
        unlimited = await _upload_seconds(free, UPLOAD_BYTES)
    with network_path(DELAY_MS, rate_mbit=RATE_MBIT) as path:
        limited = await _upload_seconds(path, UPLOAD_BYTES)
    expected = UPLOAD_BYTES * 8 / (RATE_MBIT * 1e6)
    print(
        f"{UPLOAD_BYTES} B at {DELAY_MS} ms: {limited:.3f} s at {RATE_MBIT} Mbit/s (size/rate {expected:.3f} s), "
        f"{unlimited:.3f} s unlimited; relay {path.relay_stats} / {free.relay_stats}"
    )
    assert 0.9 * expected <= limited <= 2.0 * expected
    assert unlimited < 0.6 * limited
