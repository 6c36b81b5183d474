"""Content encodings of a response body: what the client asks for and how it undoes what a server sends anyway.

Streamed requests go out with ``Accept-Encoding: identity``: a compressed event stream is held back until the
compressor emits a block, which delays tokens by exactly what latscope measures. A server (or a proxy) that
compresses anyway is decoded — ``gzip``/``x-gzip``, ``deflate`` (zlib or raw), ``br`` (the ``brotli`` package),
``zstd`` (``zstandard``) — and the timeline says it happened; an encoding there is no decoder for is a named error.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

#: The Accept-Encoding a streamed request sends.
STREAM_ACCEPT_ENCODING = ("Accept-Encoding", "identity")

Decompress = Callable[[bytes], bytes]


class UnsupportedEncoding(ValueError):
    """The response's Content-Encoding cannot be decoded here; the message names it (and what would decode it)."""


def _zlib(wbits: int) -> Decompress:
    return zlib.decompressobj(wbits).decompress


def _deflate() -> Decompress:
    """``deflate`` is meant to be zlib-wrapped (RFC 9110 §8.4.1.2) but some servers send it raw: decide on the first
    bytes."""
    state: dict[str, Any] = {}

    def feed(data: bytes) -> bytes:
        inner = state.get("d")
        if inner is None:
            raw = not data or (data[0] & 0x0F) != 8  # a zlib header's compression method is 8
            inner = state["d"] = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS).decompress
        out: bytes = inner(data)
        return out

    return feed


def _brotli() -> Decompress:
    try:
        import brotli
    except ImportError:
        raise UnsupportedEncoding("the response is brotli-compressed (br); the brotli package is missing") from None
    decompress: Decompress = brotli.Decompressor().process
    return decompress


def _zstd() -> Decompress:
    try:
        import zstandard
    except ImportError:
        raise UnsupportedEncoding("the response is zstd-compressed; the zstandard package is not installed") from None
    decompress: Decompress = zstandard.ZstdDecompressor().decompressobj().decompress
    return decompress


_DECODERS: dict[str, Callable[[], Decompress]] = {
    "gzip": lambda: _zlib(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _zlib(16 + zlib.MAX_WBITS),
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def decoder_for(content_encoding: str) -> Decompress | None:
    """A function that decodes the body piece by piece, for a ``Content-Encoding`` value (codings applied in the
    order listed, so undone in reverse); None for ``identity``. Raises :class:`UnsupportedEncoding`."""
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return None
    steps: list[Decompress] = []
    for coding in reversed(codings):
        make = _DECODERS.get(coding)
        if make is None:
            raise UnsupportedEncoding(f"the response's content encoding {coding!r} is one latscope cannot decode")
        steps.append(make())
    if len(steps) == 1:
        return steps[0]

    def chain(data: bytes) -> bytes:
        for step in steps:
            data = step(data)
        return data

    return chain
