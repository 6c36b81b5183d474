"""A deliberately hostile OpenAI-style server: one mode per misbehaviour latscope must survive without lying, leaking
or hanging.

It speaks HTTP/1.1 by hand (asyncio streams) so it can do what a well-behaved server library will not: echo a
credential back, compress a stream nobody asked to have compressed, never end a line, close a kept-alive connection
under the next request. ``GET /v1/models`` answers a model list in every mode but ``models-fail``; every other
request gets the mode's behaviour. Each mode is bounded (the endless ones stop after :data:`ENDLESS_CAP_BYTES` or
:data:`ENDLESS_CAP_S`), and the server binds 127.0.0.1.

In a test: ``async with HostileServer("empty-200") as server: ... server.base_url ...``; for a command run as a
process: ``python -m tests.support.hostile MODE`` prints the base URL on its first line and serves until killed (at
most :data:`LIFETIME_S`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

import orjson

MODEL = "hostile-model"
#: an endless mode stops writing after this many bytes …
ENDLESS_CAP_BYTES = 1024 * 1024 * 1024
#: … or this many seconds, whichever comes first
ENDLESS_CAP_S = 120.0
#: ``python -m tests.support.hostile`` exits by itself after this long
LIFETIME_S = 600.0
_caps = {"bytes": ENDLESS_CAP_BYTES}
#: the token events of the well-formed streams
TOKENS = 8


@dataclass
class Seen:
    """One request as the server read it: method, target, headers (lower-case names), body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    connection: int  #: 1-based number of the connection it came on
    on_connection: int  #: 1-based number of the request on that connection


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
        self.reader = reader
        self.writer = writer
        self.number = number
        self.requests = 0

    async def read_request(self) -> Seen | None:
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = [*lines[0].split(" "), "", ""][:3]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        try:
            body = await self.reader.readexactly(length) if length else b""
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        self.requests += 1
        return Seen(method, target, headers, body, self.number, self.requests)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 429: "Too Many Requests", 500: "Error"}
        head = f"HTTP/1.1 {status} {reason.get(status, 'Status')}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers)
        head += f"content-length: {len(body)}\r\n\r\n"
        await self.send(head.encode("latin-1") + body)

    async def start_chunked(self, headers: list[tuple[str, str]]) -> None:
        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers)
        await self.send((head + "transfer-encoding: chunked\r\n\r\n").encode("latin-1"))

    async def chunk(self, data: bytes) -> None:
        await self.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def end_chunked(self) -> None:
        await self.send(b"0\r\n\r\n")

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.close()


def chat_chunk(content: str | None = None, *, role: str | None = None, finish: str | None = None) -> bytes:
    delta: dict[str, object] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def token_stream(tokens: int = TOKENS) -> bytes:
    """A well-formed stream: role, ``tokens`` content chunks, finish, ``[DONE]``."""
    parts = [chat_chunk(role="assistant", content="")]
    parts += [chat_chunk(f"t{i} ") for i in range(tokens)]
    parts += [chat_chunk(finish="stop"), b"data: [DONE]\n\n"]
    return b"".join(parts)


SSE = ("content-type", "text/event-stream")
JSON = ("content-type", "application/json")
Mode = Callable[[_Conn, Seen], Awaitable[bool]]  #: handles one request; False: close the connection afterwards


def _error_body(message: str) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error"}})


async def _echo_key(conn: _Conn, seen: Seen) -> bool:
    # what some gateways do: the refused credential, whole, in the error message
    shown = seen.headers.get("authorization", "") + " " + seen.headers.get("ocp-apim-subscription-key", "")
    await conn.respond(401, [JSON], _error_body(f"Incorrect API key provided: {shown.strip()}"))
    return True


async def _echo_headers(conn: _Conn, seen: Seen) -> bool:
    await conn.respond(400, [JSON], _error_body(f"bad request, headers were {seen.headers}"))
    return True


async def _empty_200(conn: _Conn, seen: Seen) -> bool:
    await conn.respond(200, [SSE], b"")
    return True


async def _no_token(conn: _Conn, seen: Seen) -> bool:
    body = chat_chunk(role="assistant", content="") + chat_chunk(finish="stop") + b"data: [DONE]\n\n"
    await conn.respond(200, [SSE], body)
    return True


def _compressed(encoding: str, compress: Callable[[bytes], bytes]) -> Mode:
    async def mode(conn: _Conn, seen: Seen) -> bool:
        await conn.respond(200, [SSE, ("content-encoding", encoding)], compress(token_stream()))
        return True

    return mode


def _brotli(data: bytes) -> bytes:
    import brotli

    out: bytes = brotli.compress(data)
    return out


def _zstd(data: bytes) -> bytes:
    import zstandard

    out: bytes = zstandard.ZstdCompressor().compress(data)
    return out


async def _bad_gzip(conn: _Conn, seen: Seen) -> bool:
    await conn.respond(200, [SSE, ("content-encoding", "gzip")], token_stream())  # says gzip, is not
    return True


async def _endless(conn: _Conn, first: bytes, piece: bytes, interval_s: float = 0.0) -> bool:
    await conn.start_chunked([SSE])
    if first:  # an empty chunk would end the body
        await conn.chunk(first)
    sent, started = 0, time.monotonic()
    while sent < _caps["bytes"] and time.monotonic() - started < ENDLESS_CAP_S:
        try:
            await conn.chunk(piece)
        except ConnectionError:
            return False
        sent += len(piece)
        await asyncio.sleep(interval_s)
    if sent >= _caps["bytes"]:
        with contextlib.suppress(ConnectionError):
            await conn.end_chunked()  # the line (or event) never ended; the body does, at the cap
    return False


async def _endless_line(conn: _Conn, seen: Seen) -> bool:
    # `data: xxxxxxxx…` and never a line ending
    return await _endless(conn, b"data: ", b"x" * 65536)


async def _endless_event(conn: _Conn, seen: Seen) -> bool:
    # `data: x` lines, and never the blank line that ends the event
    return await _endless(conn, b"", b"data: x\n" * 8192)


async def _endless_stream(conn: _Conn, seen: Seen) -> bool:
    # a well-formed token every 5 ms that never finishes
    return await _endless(conn, chat_chunk(role="assistant", content=""), chat_chunk("t "), 0.005)


async def _close_after_response(conn: _Conn, seen: Seen) -> bool:
    # answers the first request on each connection, then closes the kept-alive connection under the next one
    # without a response (no `Connection: close` said so): what an idle timeout racing a request looks like
    if seen.on_connection > 1:
        return False
    await conn.respond(200, [SSE], token_stream())
    return True


async def _rate_limited(conn: _Conn, seen: Seen) -> bool:
    await conn.respond(429, [JSON, ("retry-after", "7")], _error_body("Rate limit reached for requests"))
    return True


async def _reset(conn: _Conn, seen: Seen) -> bool:
    conn.reset()
    return False


async def _fine(conn: _Conn, seen: Seen) -> bool:
    await conn.respond(200, [SSE], token_stream())
    return True


MODES: dict[str, Mode] = {
    "echo-key": _echo_key,
    "echo-headers": _echo_headers,
    "empty-200": _empty_200,
    "no-token": _no_token,
    "gzip": _compressed("gzip", gzip.compress),
    "br": _compressed("br", _brotli),
    "zstd": _compressed("zstd", _zstd),
    "unknown-encoding": _compressed("compress", lambda data: data),
    "bad-gzip": _bad_gzip,
    "endless-line": _endless_line,
    "endless-event": _endless_event,
    "endless-stream": _endless_stream,
    "close-after-response": _close_after_response,
    "rate-limited": _rate_limited,
    "reset": _reset,
    "models-fail": _fine,
}


@dataclass
class HostileServer:
    """Serve ``mode`` on 127.0.0.1 (a free port); ``seen`` lists every request read."""

    mode: str
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _connections: int = 0
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> HostileServer:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: one of {', '.join(MODES)}")
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        conn = _Conn(reader, writer, self._connections)
        self._writers.add(writer)
        try:
            while (seen := await conn.read_request()) is not None:
                self.seen.append(seen)
                if seen.method == "GET" and seen.target.rstrip("/").endswith("/models"):
                    if self.mode == "models-fail":
                        await conn.respond(500, [JSON], _error_body("the model registry is down"))
                    else:
                        listing = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                        await conn.respond(200, [JSON], orjson.dumps(listing))
                    continue
                if seen.method == "GET":
                    await conn.respond(404, [JSON], _error_body("not found"))
                    continue
                if not await MODES[self.mode](conn, seen):
                    break
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


async def _serve_forever(mode: str, port: int) -> None:
    async with HostileServer(mode, port) as server:
        print(server.base_url, flush=True)
        await asyncio.sleep(LIFETIME_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cap-mb", type=float, help="where the endless modes stop, MiB (default: 1024)")
    args = parser.parse_args()
    if args.cap_mb:
        _caps["bytes"] = int(args.cap_mb * 1024 * 1024)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.mode, args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
