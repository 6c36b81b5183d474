"""Requests, successful or failed, leave no reference cycles behind.

``latscope bench`` keeps the cyclic garbage collector off while it measures (a collection stalls the event loop for
as long as it takes to scan every young object: tens of ms with thousands of timelines buffered). That is only safe
if a request's objects are freed by reference counting alone. Each case runs a few requests, then many more, with
the collector off, and counts what ``gc.collect()`` finds: the difference must not grow with the number of requests
(a fixed amount belongs to the client and the event loop themselves).
"""

from __future__ import annotations

import gc
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import pytest

from latscope.dialects.openai import OpenAIStreamDecoder
from latscope.wire import Client, Timeouts
from tests.support.stream_server import StreamServer, paced_stream
from tests.support.tls_certs import LocalPKI
from tests.wire.conftest import chat_spec

FEW, MANY = 3, 23


def _is_latscope(obj: object) -> bool:
    """An object of latscope's own: an instance of one of its classes, or a frame of its code."""
    if isinstance(obj, types.FrameType):
        return "latscope" in obj.f_code.co_filename.replace("\\", "/").split("/")
    return type(obj).__module__.startswith("latscope.")


@contextmanager
def collector_off() -> Iterator[list[int]]:
    """Collect, switch the collector off; on exit, count latscope's objects among what a full collection finds
    (the test's in-process server makes cycles of its own; those are not the client's)."""
    found: list[int] = []
    gc.collect()
    gc.disable()
    try:
        yield found
    finally:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found.append(sum(1 for obj in gc.garbage if _is_latscope(obj)))
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
            gc.enable()


async def garbage_per_request(run: Callable[[int], Awaitable[None]]) -> float:
    """latscope objects in cyclic garbage per request beyond a fixed part: (found(MANY) − found(FEW)) ÷ (MANY − FEW)."""
    await run(1)  # first-use imports and caches
    counts = []
    for n in (FEW, MANY):
        with collector_off() as found:
            await run(n)
        counts.append(found[0])
    return (counts[1] - counts[0]) / (MANY - FEW)


async def test_streamed_requests_on_a_kept_alive_connection() -> None:
    async with StreamServer(paced_stream(4)) as server:

        async def run(n: int) -> None:
            async with Client() as client:
                for _ in range(n):
                    t = await client.request(chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"))
                    assert t.ok, t.error

        assert await garbage_per_request(run) < 1


@pytest.mark.parametrize("stamps", ["user", "kernel"])
async def test_a_new_connection_per_request(stamps: str) -> None:
    async with StreamServer(paced_stream(2)) as server:

        async def run(n: int) -> None:
            async with Client(stamps=stamps) as client:
                for _ in range(n):
                    t = await client.request(
                        chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
                    )
                    assert t.ok, t.error

        assert await garbage_per_request(run) < 1


async def test_refused_connections() -> None:
    async def run(n: int) -> None:
        async with Client(timeouts=Timeouts(connect_s=2)) as client:
            for _ in range(n):
                t = await client.request(chat_spec(), "http://127.0.0.1:1/v1")
                assert t.error is not None and t.error.kind == "refused", t.error

    assert await garbage_per_request(run) < 1


@pytest.mark.parametrize("stamps", ["user", "kernel"])
@pytest.mark.parametrize("trusted", [True, False], ids=["tls", "tls-untrusted"])
async def test_tls_requests_and_failed_handshakes(pki: LocalPKI, trusted: bool, stamps: str) -> None:
    async with StreamServer(paced_stream(2), ssl_context=pki.server_context()) as server:

        async def run(n: int) -> None:
            async with Client(ca_file=pki.ca_file if trusted else None, stamps=stamps) as client:
                for _ in range(n):
                    t = await client.request(
                        chat_spec(), server.base_url, decoder=OpenAIStreamDecoder("chat"), new_connection=True
                    )
                    assert t.ok is trusted, t.error

        assert await garbage_per_request(run) < 1
