"""A raw-socket test server: each connection runs a script that reads requests and writes exact bytes.

For the HTTP/1.1 cases a well-behaved server library cannot produce (an HTTP/1.0 answer, interim responses, a body cut
short, bytes after the response, a trailer section), the script writes the response byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

import orjson


class RawConnection:
    """One accepted connection, as a script sees it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, index: int) -> None:
        self.reader = reader
        self.writer = writer
        self.index = index  #: 1-based count of the connection on its server

    async def read_request(self) -> bytes | None:
        """The next request's head and Content-Length body, or None when the client closed the connection."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return head + (await self.reader.readexactly(length) if length else b"")

    async def send(self, data: bytes) -> None:
        """Write ``data`` and wait until it is handed to the kernel."""
        self.writer.write(data)
        await self.writer.drain()

    async def send_bytewise(self, data: bytes) -> None:
        """Write ``data`` one byte per write, yielding in between, so the client reads it in many small pieces."""
        for i in range(len(data)):
            self.writer.write(data[i : i + 1])
            await self.writer.drain()
            await asyncio.sleep(0)

    async def wait_for_client_close(self) -> None:
        """Keep the connection open until the client closes it."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass

    def close(self) -> None:
        """Close the connection (FIN)."""
        self.writer.close()


Script = Callable[[RawConnection], Awaitable[None]]


@dataclass
class RawServer:
    """Serve ``script`` on 127.0.0.1 (random port), once per accepted connection."""

    script: Script
    port: int = 0
    connections: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await asyncio.sleep(0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            await self.script(RawConnection(reader, writer, self.connections))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()


def serve_each_request(response: bytes, *, then_close: bool = False) -> Script:
    """A script answering every request on the connection with ``response``; ``then_close`` closes after the first."""

    async def script(conn: RawConnection) -> None:
        while await conn.read_request() is not None:
            await conn.send(response)
            if then_close:
                conn.close()
                return

    return script


def event(text: str) -> bytes:
    """One SSE event carrying an OpenAI chat chunk with ``text``."""
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def chunked(*pieces: bytes) -> bytes:
    """``pieces`` in HTTP/1.1 chunked coding, one chunk each, without the terminating zero-size chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces)
