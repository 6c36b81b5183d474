"""Context-manager plumbing for the lab's child processes (the lab in a subprocess, nginx in front of it)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Self


class ManagedProcess:
    """``with`` / ``async with`` over :meth:`start` and :meth:`stop`, both blocking; the async forms run them in a
    thread so the event loop (which may serve the child's upstream) keeps turning while the child starts or stops."""

    def start(self) -> Any:
        """Start the child (subclasses)."""
        raise NotImplementedError

    def stop(self) -> Any:
        """Stop the child (subclasses)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
