"""Client CPU cost per SSE event: latscope.wire (full recording) next to httpx and aiohttp, on the same stream.

A server process sends one pre-built OpenAI-style chat stream (``--events`` chunk events) as fast as the socket
takes it, framed two ways on two ports: one HTTP chunk per event, as real servers frame them, and one Content-Length
body. Each client reads the whole stream in this process; the cost is this process's CPU time (user + system, from
``time.process_time``) divided by the number of events, best of ``--repeat`` runs, the rows interleaved. The
server's CPU is not counted.

- ``wire (full recording)``: :class:`latscope.wire.Client` with the OpenAI decoder: every read stamped, every event
  decoded and recorded (``Read`` and ``StreamEvent`` records, first/last token marks, usage). Python's garbage
  collector as it comes.
- ``wire (full, gc.freeze())``: the same after ``gc.freeze()``: the objects that existed before the request (modules,
  functions, the event loop) are no longer walked by the full collections that the recorded events trigger. What a
  load runner can do once its set-up is done.
- ``wire (full, GC off: reference)``: the same with the collector disabled, to show what it costs. Not a way to run:
  the recorded events are what makes it collect.
- ``wire (full, Content-Length body)``: the full recording on the Content-Length framing.
- ``wire (framing only)``: the client with a decoder that decodes nothing: stamps, reads and HTTP framing.
- ``… kernel stamps``: the same rows with ``Client(stamps="kernel")``: the client reads the socket itself with
  ``recvmsg`` and each read carries the kernel's receive stamp besides its user-space one.
- ``httpx aiter_raw`` and ``aiohttp iter_any``: the bytes only, no SSE parsing, no JSON, no recording.
- ``wire (full, DIALECT)``: the full recording of the same number of tokens in another dialect's stream, as the lab
  writes it (Anthropic's and OpenAI Responses' typed events, TGI's token objects, Ollama's NDJSON), to compare each
  dialect's cost per event with OpenAI chat's (the first row).

The stream arrives much faster than any server writes tokens, so reads are large (hundreds of events each): this
measures the cost per event, not per read. Numbers from a machine shared with other work are noisy; compare rows of
one run.

Run: ``.venv/bin/python benchmarks/client_overhead.py [--events 200000] [--repeat 3] [--only NAME ...]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import orjson

from latscope.dialects import get_dialect
from latscope.dialects.base import Chunk
from latscope.dialects.openai import OpenAIStreamDecoder, chat_request
from latscope.timeline.model import ErrorKind, Timeline
from latscope.wire import Client
from latscope.wire.loop import new_event_loop

#: no run may take longer than this (s): a stuck client must not hang the benchmark
RUN_TIMEOUT_S = 120.0


def dialect_parts(dialect: str, events: int) -> tuple[bytes, list[bytes]]:
    """The content type and the events of a stream of ``events`` tokens in ``dialect``, shaped as the lab writes
    them (tests/fixtures/lab/)."""
    text = [f" tok{i % 1000}" for i in range(events)]
    if dialect == "anthropic.messages":
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_b",
                "role": "assistant",
                "content": [],
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        }
        end = [{"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": events}},
               {"type": "message_stop"}]  # fmt: skip
        objects = [start, *({**delta, "delta": {"type": "text_delta", "text": t}} for t in text), *end]
        return b"text/event-stream", [
            b"event: " + str(o["type"]).encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objects
        ]
    if dialect == "openai.responses":
        head = {"type": "response.output_text.delta", "item_id": "msg_b", "output_index": 0, "content_index": 0}
        usage = {"input_tokens": 5, "output_tokens": events, "total_tokens": events + 5}
        objects = [
            {"type": "response.created", "response": {"id": "resp_b", "status": "in_progress"}},
            *({**head, "delta": t, "sequence_number": i} for i, t in enumerate(text)),
            {"type": "response.completed", "response": {"id": "resp_b", "status": "completed", "usage": usage}},
        ]
        return b"text/event-stream", [
            b"event: " + str(o["type"]).encode() + b"\ndata: " + orjson.dumps(o) + b"\n\n" for o in objects
        ]
    if dialect == "tgi.generate":
        parts = []
        for i, t in enumerate(text):
            last = i == events - 1
            details = {"finish_reason": "length", "generated_tokens": events, "seed": None} if last else None
            token = {"id": i % 1000, "text": t, "logprob": -0.25, "special": False}
            obj = {"index": i + 1, "token": token, "generated_text": "".join(text) if last else None,
                   "details": details, "top_tokens": None}  # fmt: skip
            parts.append(b"data:" + orjson.dumps(obj) + b"\n\n")
        return b"text/event-stream", parts
    if dialect == "ollama.chat":
        head = {"model": "bench-model", "created_at": "2026-01-01T00:00:00.000000Z"}
        objects = [{**head, "message": {"role": "assistant", "content": t}, "done": False} for t in text]
        objects.append({**head, "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "length",
                        "prompt_eval_count": 5, "eval_count": events})  # fmt: skip
        return b"application/x-ndjson", [orjson.dumps(o) + b"\n" for o in objects]
    raise ValueError(dialect)


def frame(content_type: bytes, parts: list[bytes]) -> bytes:
    """An HTTP response with one chunk per event."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: %b\r\ncache-control: no-cache\r\n" % content_type
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return head + b"transfer-encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


def build_stream(events: int, framing: str) -> bytes:
    """The whole HTTP response: head and a body of ``events`` content chunks, a finish chunk with usage, [DONE];
    with ``framing`` a dialect's name, that dialect's stream of ``events`` tokens."""
    if framing in DIALECT_ROWS:
        return frame(*dialect_parts(framing, events))
    parts = []
    for i in range(events):
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [{"index": 0, "delta": {"content": f" tok{i % 1000}"}, "finish_reason": None}],
        }
        parts.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    final = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": events, "total_tokens": events + 5},
    }
    parts.append(b"data: " + orjson.dumps(final) + b"\n\n")
    parts.append(b"data: [DONE]\n\n")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    if framing == "length":
        body = b"".join(parts)
        return head + b"content-length: %d\r\n\r\n" % len(body) + body
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return head + b"transfer-encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


def _serve_one(conn: socket.socket, payload: bytes) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = b""
        while b"\r\n\r\n" not in request:
            data = conn.recv(65536)
            if not data:
                return
            request += data
        head, _, body = request.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                want = int(line.split(b":", 1)[1])
                while len(body) < want:
                    data = conn.recv(65536)
                    if not data:
                        return
                    body += data
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(5)
        try:
            while conn.recv(65536):  # wait for the client to close: its FIN, not ours, ends the measurement
                pass
        except OSError:
            pass


def serve(port_queue: mp.Queue[dict[str, int]], events: int) -> None:
    """The server process: one listener per framing, one thread per connection, each sends the whole response in
    one sendall."""
    ports: dict[str, int] = {}
    for framing in FRAMINGS:
        payload = build_stream(events, framing)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        ports[framing] = listener.getsockname()[1]
        threading.Thread(target=_accept, args=(listener, payload), daemon=True).start()
    port_queue.put(ports)
    threading.Event().wait()  # until terminated


def _accept(listener: socket.socket, payload: bytes) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(conn, payload), daemon=True).start()


class NullDecoder:
    """A StreamDecoder that decodes nothing: isolates the client's framing and recording from event decoding."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def feed(self, data: bytes) -> list[Chunk]:
        return []

    def close(self) -> list[Chunk]:
        return []


def _checked(t: Timeline, events: int, *, counted: Callable[[Timeline], int]) -> Callable[[], None]:
    """What a row checks once its clock has stopped: the stream arrived whole, ``events`` tokens of it."""

    def check() -> None:
        assert t.ok, t.error
        content = counted(t)
        assert content == events, (content, events)

    return check


def _token_events(t: Timeline) -> int:
    return sum(1 for e in t.events if e.tokens)


def _tokens(t: Timeline) -> int:
    return sum(e.tokens for e in t.events)


async def run_wire(url: str, events: int, stamps: str = "user") -> Callable[[], None]:
    spec = chat_request("bench-model", "hi", events)
    async with Client(stamps=stamps) as client:
        t = await client.request(spec, url, decoder=OpenAIStreamDecoder("chat"))
    return _checked(t, events, counted=_token_events)


def run_wire_dialect(dialect: str) -> Callable[[str, int], Awaitable[Callable[[], None]]]:
    """The full recording of a stream in ``dialect``."""

    async def run(url: str, events: int) -> Callable[[], None]:
        speaks = get_dialect(dialect)
        base = url.removesuffix("/v1") + speaks.base_path
        async with Client() as client:
            t = await client.request(speaks.build_request("bench-model", "hi", events), base)
        return _checked(t, events, counted=_tokens)

    return run


async def run_wire_framing(url: str, events: int, stamps: str = "user") -> int:
    spec = chat_request("bench-model", "hi", events)
    async with Client(stamps=stamps) as client:
        t = await client.request(spec, url, decoder=NullDecoder())
    # nothing decoded is no token: the client names the stream empty, having read every byte of it
    assert t.error is not None and t.error.kind is ErrorKind.EMPTY, t.error
    return events


async def run_httpx(url: str, events: int) -> int:
    import httpx

    spec = chat_request("bench-model", "hi", events)
    nbytes = 0
    async with httpx.AsyncClient(timeout=RUN_TIMEOUT_S) as client:
        headers = dict(spec.headers)
        async with client.stream("POST", url + spec.path, content=spec.body, headers=headers) as response:
            async for raw in response.aiter_raw():
                nbytes += len(raw)
    assert nbytes > events
    return events


async def run_aiohttp(url: str, events: int) -> int:
    import aiohttp

    spec = chat_request("bench-model", "hi", events)
    nbytes = 0
    timeout = aiohttp.ClientTimeout(total=RUN_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        headers = dict(spec.headers)
        async with session.post(url + spec.path, data=spec.body, headers=headers) as response:
            async for raw in response.content.iter_any():
                nbytes += len(raw)
    assert nbytes > events
    return events


#: the other dialects' rows, each on a listener of its own
DIALECT_ROWS = ("anthropic.messages", "openai.responses", "tgi.generate", "ollama.chat")
FRAMINGS = ("chunked", "length", *DIALECT_ROWS)

GcMode = Literal["default", "freeze", "off"]


@dataclass(frozen=True)
class Row:
    #: one run; what it returns, if callable, is the run's check, called once the clock has stopped
    run: Callable[[str, int], Awaitable[object]]
    framing: str = "chunked"
    gc_mode: GcMode = "default"


ROWS: dict[str, Row] = {
    "wire (full recording)": Row(run_wire),
    "wire (full, gc.freeze())": Row(run_wire, gc_mode="freeze"),
    "wire (full, GC off: reference)": Row(run_wire, gc_mode="off"),
    "wire (full, Content-Length body)": Row(run_wire, framing="length"),
    "wire (framing only)": Row(run_wire_framing),
    "wire (full, kernel stamps)": Row(partial(run_wire, stamps="kernel")),
    "wire (framing only, kernel stamps)": Row(partial(run_wire_framing, stamps="kernel")),
    "httpx aiter_raw": Row(run_httpx),
    "aiohttp iter_any": Row(run_aiohttp),
    **{f"wire (full, {name})": Row(run_wire_dialect(name), framing=name) for name in DIALECT_ROWS},
}


@dataclass
class Measure:
    cpu_s: float
    wall_s: float
    events: int


def measure(row: Row, url: str, events: int, loop_name: str) -> Measure:
    factory = new_event_loop if loop_name == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        gc.collect()  # every row starts from the same heap, not the last row's garbage
        if row.gc_mode == "freeze":
            gc.freeze()
        elif row.gc_mode == "off":
            gc.disable()
        try:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            outcome = runner.run(asyncio.wait_for(row.run(url, events), RUN_TIMEOUT_S))
            cpu1, wall1 = time.process_time(), time.perf_counter()
            if callable(outcome):
                outcome()  # its check, off the clock: reading the events back is not the client's cost
        finally:
            gc.enable()
            gc.unfreeze()
    return Measure(cpu1 - cpu0, wall1 - wall0, events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--only", action="append", choices=list(ROWS), help="run only these rows")
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    port_queue: mp.Queue[dict[str, int]] = ctx.Queue()
    server = ctx.Process(target=serve, args=(port_queue, args.events), daemon=True)
    server.start()
    try:
        ports = port_queue.get(timeout=60)
        urls = {framing: f"http://127.0.0.1:{port}/v1" for framing, port in ports.items()}
        names = args.only or list(ROWS)
        for name in names:  # warm-up: imports, first connection, caches
            measure(ROWS[name], urls[ROWS[name].framing], args.events, args.loop)
        best: dict[str, Measure] = {}
        for _ in range(args.repeat):
            for name in names:  # interleaved, so a noisy moment on the machine hits every row alike
                row = ROWS[name]
                m = measure(row, urls[row.framing], args.events, args.loop)
                if name not in best or m.cpu_s < best[name].cpu_s:
                    best[name] = m
    finally:
        server.terminate()
        server.join(5)

    print(f"{args.events} events, {args.loop}, best of {args.repeat}, client CPU only (noisy on a shared machine)")
    print(f"{'client':<36} {'CPU µs/event':>13} {'events/s (1 core)':>18} {'wall s':>8}")
    for name, m in best.items():
        per_event_us = m.cpu_s / m.events * 1e6
        print(f"{name:<36} {per_event_us:>13.2f} {m.events / m.cpu_s:>18,.0f} {m.wall_s:>8.2f}")
    if "wire (full recording)" in best and "httpx aiter_raw" in best:
        ratio = best["httpx aiter_raw"].cpu_s / best["wire (full recording)"].cpu_s
        print(f"httpx aiter_raw / wire (full recording) CPU: {ratio:.1f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
