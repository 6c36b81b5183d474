"""What the HTTP/1.1 and HTTP/2 sessions share: timers, write flow control and running handlers as tasks.

A session is one connection after TLS and protocol selection. It is driven by the connection's ``asyncio.Protocol``
callbacks (forwarded by :mod:`.server`), owns the transport, and runs each complete request's handler as a task
that is cancelled when the client goes away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from latscope.lab.errors import ErrorResponse
from latscope.lab.http.exchange import ConnectionInfo, Handler, Request, ResponseChannel
from latscope.lab.http.limits import ConnectionLimits

logger = logging.getLogger("latscope.lab")

JSON_CONTENT_TYPE = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """How every session of one server behaves."""

    handler: Handler
    limits: ConnectionLimits
    keep_alive: bool  #: False: close after every response (the ``no-keepalive`` fault)


def error_response(status: int, message: str, code: str | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of a JSON error the HTTP layer sends on its own (malformed request, timeout …)."""
    return status, [JSON_CONTENT_TYPE], ErrorResponse(status, message, code=code).body()


class Session:
    """Base of one connection's protocol session. A subclass sets up its protocol state in :meth:`_start`, which
    the constructor calls last."""

    def __init__(
        self,
        transport: asyncio.Transport,
        info: ConnectionInfo,
        config: SessionConfig,
        on_closed: Callable[[Session], None],
    ) -> None:
        self.transport = transport
        self.info = info
        self.config = config
        self.limits = config.limits
        self.lost = False  #: the connection is gone (connection_lost ran)
        self._loop = asyncio.get_running_loop()
        self._on_closed = on_closed
        self._timer: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._start()

    def _start(self) -> None:
        """Set up the protocol's own state and arm its first timer (the constructor's last step)."""
        raise NotImplementedError

    # -- asyncio.Protocol callbacks, forwarded by the server's connection protocol ---------------------------------
    def data_received(self, data: bytes) -> None:
        raise NotImplementedError

    def eof_received(self) -> bool | None:
        # A client that half-closes mid-request is treated as gone (as uvicorn and nginx do by default): returning
        # None lets the transport close, and connection_lost cancels whatever the client was waiting for.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost:
            return
        self.lost = True
        self._disarm()
        for task in list(self._tasks):
            task.cancel()
        self._wake_writers()
        self._on_closed(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    # -- for channels and subclasses ---------------------------------------------------------------------------------
    @property
    def write_paused(self) -> bool:
        """The transport asked us to stop writing (its buffer is above the high-water mark)."""
        return self._write_paused and not self.lost

    async def wait_writable(self) -> None:
        """Return once the transport accepts writes again (or the connection is gone)."""
        if not self._write_paused or self.lost:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def shutdown(self) -> None:
        """Server stop: cancel running handlers and close the connection (subclasses say goodbye first)."""
        self.close()

    def close(self) -> None:
        """Close the transport after what is already written has been flushed."""
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def _wake_writers(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._timer = self._loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _spawn(self, request: Request, channel: ResponseChannel) -> asyncio.Task[None]:
        task = self._loop.create_task(self._run(request, channel))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, request: Request, channel: ResponseChannel) -> None:
        try:
            await self.config.handler(request, channel)
        except asyncio.CancelledError:
            pass  # the client went away or the server is stopping; the handler released what it held on its way out
        except Exception:
            logger.exception("lab handler failed on %s %s", request.method, request.path)
            if channel.headers_sent_ns is None and not channel.closed:
                try:
                    channel.respond(*error_response(500, "The lab failed to answer this request.", "internal_error"))
                except Exception:  # the protocol state itself is broken: closing is all that is left
                    self.close()
        finally:
            self._handler_done(request, channel)

    def _handler_done(self, request: Request, channel: ResponseChannel) -> None:
        """Called once per request after its handler returned (or failed, or was cancelled)."""
        raise NotImplementedError


def now_ns() -> int:
    """The one clock of the lab: :func:`time.monotonic_ns`."""
    return time.monotonic_ns()
