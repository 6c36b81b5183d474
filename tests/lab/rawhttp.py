"""A minimal raw HTTP/1.1 client for lab tests: exact bytes out, every socket read stamped on the way in.

For what the measuring client (``latscope.wire``) deliberately cannot do: send malformed or oversized requests,
trickle headers, hang up mid-stream, and look at raw read boundaries without decoding.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import cast

import h11
import orjson


@dataclass
class RawResponse:
    """What came back on one connection: every read (monotonic ns, bytes) and the parsed responses."""

    reads: list[tuple[int, bytes]] = field(default_factory=list)
    closed_ns: int | None = None  #: when the server closed the connection, None if it stayed open (or we closed)

    @property
    def data(self) -> bytes:
        return b"".join(chunk for _, chunk in self.reads)

    def responses(self) -> list[tuple[h11.Response, bytes]]:
        """The complete responses in the bytes read, in order (head, body)."""
        conn = h11.Connection(h11.CLIENT)
        out: list[tuple[h11.Response, bytes]] = []
        # The parser needs to know what was asked: one GET per expected response is enough for framing.
        conn.send(h11.Request(method="GET", target="/", headers=[("host", "lab")]))
        conn.send(h11.EndOfMessage())
        conn.receive_data(self.data)
        if self.closed_ns is not None:
            conn.receive_data(b"")
        head: h11.Response | None = None
        body: list[bytes] = []
        for _ in range(100_000):  # bounded: one event per pass
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                break  # the connection ended mid-response: what was complete is returned
            if isinstance(event, h11.Response):
                head, body = event, []
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                out.append((head, b"".join(body)))
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    break
                conn.start_next_cycle()
                conn.send(h11.Request(method="GET", target="/", headers=[("host", "lab")]))
                conn.send(h11.EndOfMessage())
            else:
                break
        return out


class _Recorder(asyncio.Protocol):
    def __init__(self, response: RawResponse) -> None:
        self.response = response
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.data_event = asyncio.Event()
        self.closed_by_us = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        self.response.reads.append((time.monotonic_ns(), data))
        self.data_event.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed_by_us and self.response.closed_ns is None:
            self.response.closed_ns = time.monotonic_ns()
        if not self.closed.done():
            self.closed.set_result(None)
        self.data_event.set()


class RawConnection:
    """One TCP connection to the lab with timestamped reads."""

    def __init__(self, recorder: _Recorder) -> None:
        self._recorder = recorder
        self.response = recorder.response

    @classmethod
    async def open(cls, host: str, port: int) -> RawConnection:
        loop = asyncio.get_running_loop()
        response = RawResponse()
        _, protocol = await loop.create_connection(lambda: _Recorder(response), host, port)
        return cls(protocol)

    def send(self, data: bytes) -> None:
        assert self._recorder.transport is not None
        self._recorder.transport.write(data)

    async def wait_closed(self, timeout: float) -> bool:
        """True when the server closed the connection within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(asyncio.shield(self._recorder.closed), timeout)
        except TimeoutError:
            return False
        return True

    async def wait_for(self, marker: bytes, timeout: float, count: int = 1) -> bool:
        """Wait until ``marker`` occurs ``count`` times in what was read (or the connection closed)."""
        deadline = time.monotonic() + timeout
        while self.response.data.count(marker) < count and self.response.closed_ns is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._recorder.data_event.clear()
            try:
                await asyncio.wait_for(self._recorder.data_event.wait(), left)
            except TimeoutError:
                return False
        return self.response.data.count(marker) >= count

    def abort(self) -> None:
        """Hang up without a goodbye (RST when unread data is pending): the client that went away."""
        if self._recorder.transport is not None:
            self._recorder.closed_by_us = True
            self._recorder.transport.abort()

    def close(self) -> None:
        if self._recorder.transport is not None:
            self._recorder.closed_by_us = True
            self._recorder.transport.close()


def post(
    path: str, body: bytes, *, extra_headers: list[tuple[str, str]] | None = None, content_length: int | None = None
) -> bytes:
    """A POST request's bytes (``content_length`` overrides the real one, to lie about the size)."""
    headers = [
        ("host", "lab"),
        ("content-type", "application/json"),
        ("content-length", str(len(body) if content_length is None else content_length)),
    ]
    headers += extra_headers or []
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: lab\r\n\r\n".encode()


def chat_body(max_tokens: int = 4, *, stream: bool = False, model: str = "lab-model", **extra: object) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "hello there"}],
            "max_tokens": max_tokens,
            "stream": stream,
            **extra,
        }
    )


async def exchange(
    host: str, port: int, data: bytes, *, timeout: float = 10.0, until: bytes | None = None
) -> RawResponse:
    """Send ``data`` on a new connection; read until the server closes it, ``until`` appears, or ``timeout``."""
    conn = await RawConnection.open(host, port)
    conn.send(data)
    if until is None:
        await conn.wait_closed(timeout)
    else:
        await conn.wait_for(until, timeout)
    conn.close()
    return conn.response
