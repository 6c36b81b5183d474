"""Event-loop helpers: every latscope client runs on uvloop when it is installed.

uvloop matters for measurement, not only for speed: on plain asyncio a busy loop adds milliseconds between a byte
arriving and ``data_received`` running (reference/network-timing.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def uvloop_available() -> bool:
    """True when uvloop can be imported (it is not built for Windows)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed, asyncio's default otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion on a fresh loop from :func:`new_event_loop` and close the loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
