"""A tiny scripted OpenAI-style SSE server for the load tests: chosen token gaps, stalls, HTTP errors, resets.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length request bodies, chunked responses) for
``POST /v1/chat/completions`` and ``GET /v1/models``. What each request gets is decided by a :class:`Script` from
the request's arrival number (0, 1, 2, … across all connections), so a test can say "requests 10–19 get a 503,
requests 20–29 are reset after 3 tokens, every request stalls 50 ms before its 5th token".
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson


@dataclass
class Script:
    """Behaviour per request number ``n``. Times in seconds."""

    tokens: int | None = None  #: tokens to stream (None: the request's max_tokens)
    first_token_s: float = 0.0  #: delay before the first token
    gap_s: float = 0.001  #: delay between tokens
    stall_s: Callable[[int, int], float] = lambda n, k: 0.0  #: extra delay before token k of request n
    status: Callable[[int], int | None] = lambda n: None  #: an error status to answer instead of a stream
    #: extra response headers of an error status (Retry-After, x-should-retry …)
    error_headers: Callable[[int], dict[str, str]] = lambda n: {}
    reset_after: Callable[[int], int | None] = lambda n: None  #: abort the connection after this many tokens
    refuse_after: int | None = None  #: stop listening once this many requests arrived (later connects fail)
    usage: bool = True


@dataclass
class ScriptedServer:
    """Run with ``async with ScriptedServer(script) as server: server.url``."""

    script: Script = field(default_factory=Script)
    requests: int = 0
    #: every generation request as it arrived: (monotonic ns its head was read, its headers in lower case)
    seen: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    url: str = ""
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                arrived_ns = time.monotonic_ns()
                lines = head.decode("latin-1").split("\r\n")
                _, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if path.endswith("/models"):
                    await self._plain(writer, 200, b'{"object":"list","data":[{"id":"scripted","object":"model"}]}')
                    continue
                n = self.requests
                self.requests += 1
                self.seen.append((arrived_ns, headers))
                refuse = self.script.refuse_after
                if refuse is not None and self.requests >= refuse and self._server is not None:
                    self._server.close()  # no new connections from now on
                if not await self._stream(writer, n, orjson.loads(body) if body else {}):
                    return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _plain(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
        writer.write(head.encode() + body)
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, n: int, request: dict[str, object]) -> bool:
        """Answer request ``n``; False when the connection was aborted."""
        s = self.script
        status = s.status(n)
        if status is not None:
            failure = b'{"error":{"message":"scripted failure","type":"server_error"}}'
            await self._plain(writer, status, failure, s.error_headers(n))
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def event(obj: object) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
            return {
                "id": f"c{n}",
                "object": "chat.completion.chunk",
                "model": "scripted",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        event(chunk({"role": "assistant", "content": ""}))
        await writer.drain()
        max_tokens = request.get("max_tokens")
        tokens = s.tokens if s.tokens is not None else int(max_tokens) if isinstance(max_tokens, int) else 8
        reset = s.reset_after(n)
        for k in range(tokens):
            delay = (s.first_token_s if k == 0 else s.gap_s) + s.stall_s(n, k)
            if delay > 0:
                await asyncio.sleep(delay)
            if reset is not None and k >= reset:
                writer.transport.abort()
                return False
            event(chunk({"content": "tok "}))
            await writer.drain()
        event(chunk({}, "length"))
        if s.usage:
            event(
                {
                    "id": f"c{n}",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
                }
            )
        event(b"[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


class ThreadedServer:
    """A :class:`ScriptedServer` on its own event loop in a background thread (for synchronous callers)."""

    def __init__(self, script: Script | None = None) -> None:
        self.server = ScriptedServer(script or Script())
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scripted-sse", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self.server.__aenter__())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.server.close(), self._loop)
        with contextlib.suppress(Exception):
            fut.result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def url(self) -> str:
        return self.server.url
