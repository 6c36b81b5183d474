"""The fuzz targets (see the package docstring): each a hypothesis-driven check of one reader."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from latscope.dialects.anthropic import AnthropicStreamDecoder
from latscope.dialects.base import StreamDecodeError, StreamDecoder
from latscope.dialects.errors import decode_error_body
from latscope.dialects.ollama import OllamaStreamDecoder
from latscope.dialects.openai import OpenAIStreamDecoder, chat_request
from latscope.dialects.responses import ResponsesStreamDecoder
from latscope.dialects.tgi import TgiStreamDecoder
from latscope.sse.limits import StreamLimitError, StreamLimits
from latscope.sse.parser import SSEParser
from latscope.timeline.model import ErrorKind
from latscope.wire import Client, Timeouts
from latscope.wire.loop import new_event_loop

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
#: small limits, so that the limit paths are fuzzed too
LIMITS = StreamLimits(max_line_bytes=2048, max_event_bytes=4096)


def _corpus(*patterns: str) -> list[bytes]:
    found = [p.read_bytes() for pattern in patterns for p in sorted(FIXTURES.glob(pattern))]
    return [data for data in found if data] or [b"data: {}\n\n"]


def _body(capture: bytes) -> bytes:
    """A capture's body, roughly (after the head; chunked framing left in: more to chew on)."""
    return capture.split(b"\r\n\r\n", 1)[-1]


STREAMS = [_body(c) for c in _corpus("real/*.stream.http")]
NDJSON = _corpus("ollama/*.ndjson") + [_body(c) for c in _corpus("lab/ollama.*.stream.http")]
RESPONSES = _corpus("real/*.http", "lab/*.http")
#: the lab's streams of each typed-event dialect (tests/fixtures/lab/), by decoder
ANTHROPIC = [_body(c) for c in _corpus("lab/anthropic.*.stream.http")]
OPENAI_RESPONSES = [_body(c) for c in _corpus("lab/openai.responses.*stream.http")]
TGI = [_body(c) for c in _corpus("lab/tgi.*.stream.http")]


def _edit(data: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for position, action, payload in edits:
        at = position % (len(out) + 1)
        if action == 0:  # insert
            out[at:at] = payload
        elif action == 1:  # delete
            del out[at : at + len(payload) + 1]
        elif action == 2 and out:  # overwrite
            out[at : at + len(payload)] = payload
        else:  # duplicate a slice
            out[at:at] = out[at : at + 64]
    return bytes(out)


def mutated(corpus: list[bytes]) -> st.SearchStrategy[bytes]:
    """Real bytes with a few edits, or arbitrary bytes."""
    edits = st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 3), st.binary(max_size=12)), max_size=6)
    return st.builds(_edit, st.sampled_from(corpus), edits) | st.binary(max_size=2048)


splits = st.lists(st.integers(1, 512), max_size=24)


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    out, start = [], 0
    for size in cuts:
        out.append(data[start : start + size])
        start += size
    out.append(data[start:])
    return [p for p in out if p]


def _feed(decoder: StreamDecoder, pieces: list[bytes]) -> None:
    with contextlib.suppress(StreamDecodeError, StreamLimitError):
        for piece in pieces:
            for chunk in decoder.feed(piece):
                assert isinstance(chunk.text, str) and chunk.tokens >= 0
        decoder.close()
    assert all(isinstance(w, str) for w in decoder.warnings)


def check_sse(data: bytes, cuts: list[int]) -> None:
    """Any split gives the same events as one feed; only the limit error may be raised."""
    whole = SSEParser(LIMITS)
    split = SSEParser(LIMITS)
    try:
        expected = whole.feed(data)
        whole.close()
    except StreamLimitError:
        return
    got = []
    try:
        for piece in _pieces(data, cuts):
            got += split.feed(piece)
        split.close()
    except StreamLimitError:
        return  # a split may hold a line past the limit that one feed would have ended in the same call
    assert [(e.event, e.data, e.id, e.retry) for e in got] == [(e.event, e.data, e.id, e.retry) for e in expected]


def check_openai(data: bytes, cuts: list[int]) -> None:
    for mode in ("chat", "completions"):
        _feed(OpenAIStreamDecoder(mode, limits=LIMITS), _pieces(data, cuts))


def check_ollama(data: bytes, cuts: list[int]) -> None:
    _feed(OllamaStreamDecoder(limits=LIMITS), _pieces(data, cuts))


def check_anthropic(data: bytes, cuts: list[int]) -> None:
    _feed(AnthropicStreamDecoder(limits=LIMITS), _pieces(data, cuts))


def check_responses(data: bytes, cuts: list[int]) -> None:
    _feed(ResponsesStreamDecoder(limits=LIMITS), _pieces(data, cuts))


def check_tgi(data: bytes, cuts: list[int]) -> None:
    _feed(TgiStreamDecoder(limits=LIMITS), _pieces(data, cuts))


def check_errors(data: bytes, cuts: list[int]) -> None:
    for ctype in ("application/json", "text/html", None):
        error = decode_error_body(400 + len(cuts), data, ctype)
        assert isinstance(error.message, str)


class _Loopback:
    """A loopback server that answers every request with the current fuzz input, in its pieces, then closes; and
    a client, on one event loop that lives as long as the target runs."""

    def __init__(self) -> None:
        self.loop = new_event_loop()
        self.pieces: list[bytes] = []
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        self.spec = chat_request("m", "hi", 4)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            for piece in self.pieces:
                writer.write(piece)
                await writer.drain()
        writer.close()

    def request(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

        async def one() -> None:
            async with Client(timeouts=Timeouts(connect_s=2, headers_s=2, read_s=2, total_s=5)) as client:
                t = await client.request(self.spec, self.url)
            assert t.error is None or t.error.kind is not ErrorKind.INTERNAL, t.error
            assert t.ended_ns is not None

        self.loop.run_until_complete(one())


_loopback: _Loopback | None = None


def check_http11(data: bytes, cuts: list[int]) -> None:
    global _loopback
    if _loopback is None:
        _loopback = _Loopback()
    _loopback.request(_pieces(data, cuts))


@dataclass(frozen=True)
class Target:
    check: Callable[[bytes, list[int]], None]
    inputs: st.SearchStrategy[bytes]


TARGETS: dict[str, Target] = {
    "sse": Target(check_sse, mutated(STREAMS)),
    "openai": Target(check_openai, mutated(STREAMS)),
    "ollama": Target(check_ollama, mutated(NDJSON)),
    "anthropic": Target(check_anthropic, mutated(ANTHROPIC)),
    "responses": Target(check_responses, mutated(OPENAI_RESPONSES)),
    "tgi": Target(check_tgi, mutated(TGI)),
    "errors": Target(check_errors, mutated(RESPONSES)),
    "http11": Target(check_http11, mutated(RESPONSES)),
}


def run(name: str, seconds: float) -> int:
    """Run target ``name`` for about ``seconds``; the number of inputs tried. A failure raises (hypothesis shrinks
    it first and prints the smallest input)."""
    target = TARGETS[name]
    tried = 0

    @settings(
        max_examples=200, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(target.inputs, splits)
    def batch(data: bytes, cuts: list[int]) -> None:
        nonlocal tried
        tried += 1
        target.check(data, cuts)

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch()
    return tried
