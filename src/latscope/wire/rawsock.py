"""A socket read by the client itself, so each read carries the kernel's receive stamp.

asyncio's and uvloop's transports read with ``recv``, which drops the kernel's timestamps; :class:`StampedSocket`
registers its own reader on the loop (``loop.add_reader``) for the non-blocking socket, reads with ``recvmsg`` and
hands each read to a :class:`~latscope.wire.transport.WireProtocol` with two stamps: the kernel's software receive
stamp (``SO_TIMESTAMPNS``, converted to the monotonic clock by :data:`~latscope.wire.kstamps.CLOCK`) and the
user-space stamp taken as soon as ``recvmsg`` returned. Their difference is the time the data waited for the client.

It also stands in for the transport on the write side (``write``, ``close``, ``abort``, ``is_closing``,
``get_write_buffer_size``): writes go straight to ``send``; what the kernel does not take is buffered, sent when the
socket is writable, and the protocol is paused while anything is buffered (asyncio's behaviour with a high-water mark
of 0, which the client asks of every transport: ``drain()`` returns once every byte was handed to the kernel).

A read the kernel returns without a stamp keeps its user-space stamp alone (``user_ns`` None) and is counted in
:attr:`StampedSocket.unstamped_reads`; the timeline shows it per read (:class:`~latscope.timeline.model.Read`).

The read itself has two implementations that behave alike: the compiled ``latscope.wire._rawread.StampedReader``,
built with the package where a C compiler was at hand, and :meth:`StampedSocket._on_readable` in Python, the
reference and the fallback (:mod:`latscope.compiled`). :data:`READ_PATH` says which one this process uses.
"""

from __future__ import annotations

import asyncio
import socket
from time import monotonic_ns
from typing import TYPE_CHECKING, Any

from latscope import compiled
from latscope.wire.kstamps import ANCILLARY_BYTES, CLOCK, SCM_TIMESTAMPNS, TIMESPEC
from latscope.wire.transport import WireProtocol

if TYPE_CHECKING:
    from latscope.wire._rawread import StampedReader

#: bytes asked of one ``recvmsg``. CPython allocates this much for every call before shrinking the result: 256 KiB
#: (uvloop's own read size, into a buffer it keeps) costs more per read than 64 KiB, for glibc serves it with mmap
#: (benchmarks/read_cost.py). More pending data is read on the loop's next turn. The compiled reader keeps a buffer
#: of this size per connection and copies out what a read returned.
READ_BYTES = 65_536


def _compiled_reader() -> type[StampedReader] | None:
    """The compiled reader's type, or None where it was not built or ``LATSCOPE_PURE_PYTHON`` asks for Python."""
    if not compiled.allowed():
        return None
    try:
        from latscope.wire._rawread import StampedReader  # built at install time where a C compiler was at hand
    except ImportError:
        return None
    return StampedReader


_StampedReader = _compiled_reader()
#: which read path kernel-stamped connections take in this process: ``compiled`` or ``python``
READ_PATH = "python" if _StampedReader is None else "compiled"

_SOL_SOCKET = socket.SOL_SOCKET
_SEC = 1_000_000_000
_unpack_timespec = TIMESPEC.unpack_from


class StampedSocket:
    """The reading and writing side of one connected, non-blocking socket, driven by ``loop`` for ``protocol``.

    Construction attaches it: ``protocol.connection_made`` runs and the reader is registered at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: WireProtocol) -> None:
        self._loop = loop
        self._sock: socket.socket | None = sock
        self._fd = sock.fileno()
        self._protocol: WireProtocol | None = protocol
        self._buffer = bytearray()
        self._closing = False
        self._reading = True
        self._unstamped_reads = 0
        self._recvmsg: Any = sock.recvmsg  # bound once: one attribute lookup less per read
        self._deliver: Any = protocol.stamped_data_received
        self._native: StampedReader | None = None
        protocol.connection_made(self)  # type: ignore[arg-type]  # duck-typed, like uvloop's transports
        if _StampedReader is not None:
            self._native = _StampedReader(self._fd, self._deliver, self._on_eof, self._fatal, CLOCK, READ_BYTES)
            loop.add_reader(self._fd, self._native)
        else:
            loop.add_reader(self._fd, self._on_readable)

    # --- reading ------------------------------------------------------------------------------------------------

    @property
    def unstamped_reads(self) -> int:
        """Reads that came back without a kernel stamp (delivered with their user-space stamp alone)."""
        native = self._native
        return self._unstamped_reads + (0 if native is None else native.unstamped_reads)

    def _on_readable(self) -> None:
        # the hot path of a kernel-stamped connection: one call per read, kept short
        recvmsg = self._recvmsg
        if recvmsg is None:  # closed under us
            return
        try:
            data, ancdata, _flags, _address = recvmsg(READ_BYTES, ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        user_ns = monotonic_ns()  # first thing after the read: the user-space stamp, as a transport takes it
        deliver = self._deliver
        if deliver is None:
            return
        if not data:
            self._on_eof()
            return
        if ancdata:
            # SO_TIMESTAMPNS is the only option asking for ancillary data: its message comes first
            level, kind, raw = ancdata[0]
            if kind == SCM_TIMESTAMPNS and level == _SOL_SOCKET and len(raw) >= 16:
                sec, nsec = _unpack_timespec(raw)
                clock = CLOCK
                offset = clock.offset_ns if user_ns < clock.next_ns else clock.refresh(user_ns)
                at_ns = sec * _SEC + nsec - offset
                if at_ns > user_ns:
                    # later than the read itself: the realtime clock was stepped since the offset was measured
                    at_ns = sec * _SEC + nsec - clock.refresh(user_ns)
                if at_ns <= user_ns:
                    deliver(data, at_ns, user_ns)
                    return
        self._unstamped_reads += 1
        deliver(data, user_ns, None)

    def _on_eof(self) -> None:
        self._stop_reading()
        protocol = self._protocol
        keep_open = protocol is not None and protocol.eof_received()
        if not keep_open:
            self.close()

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            if not self._loop.is_closed():
                self._loop.remove_reader(self._fd)

    # --- writing ------------------------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``; what the kernel does not take now is buffered and the protocol paused until it is."""
        sock = self._sock
        if sock is None or self._closing or not data:
            return
        if self._buffer:
            self._buffer += data
            return
        try:
            sent = sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._fatal(exc)
            return
        if sent == len(data):
            return
        self._buffer += memoryview(data)[sent:]
        self._loop.add_writer(self._fd, self._on_writable)
        if self._protocol is not None:
            self._protocol.pause_writing()

    def _on_writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sent = sock.send(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        del self._buffer[:sent]
        if self._buffer:
            return
        self._loop.remove_writer(self._fd)
        if self._protocol is not None:
            self._protocol.resume_writing()
        if self._closing:
            self._finish(None)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Accepted for the protocol's sake: this transport always pauses while anything is buffered."""

    def get_write_buffer_size(self) -> int:
        """Bytes written and not yet taken by the kernel."""
        return len(self._buffer)

    # --- closing ------------------------------------------------------------------------------------------------

    def is_closing(self) -> bool:
        """True once :meth:`close` or :meth:`abort` ran or the connection failed."""
        return self._closing or self._sock is None

    def close(self) -> None:
        """Stop reading; close once the buffered bytes were sent; the protocol's ``connection_lost`` follows."""
        if self._closing or self._sock is None:
            return
        self._closing = True
        self._stop_reading()
        if not self._buffer:
            self._loop.call_soon(self._finish, None)

    def abort(self) -> None:
        """Close at once, dropping buffered bytes."""
        if self._sock is None:
            return
        self._closing = True
        self._buffer.clear()
        self._stop_reading()
        self._loop.call_soon(self._finish, None)

    def _fatal(self, exc: OSError) -> None:
        self._closing = True
        self._buffer.clear()
        self._stop_reading()
        self._finish(exc.with_traceback(None))

    def _finish(self, exc: BaseException | None) -> None:
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        self._recvmsg = self._deliver = None
        if self._native is not None:
            self._unstamped_reads += self._native.unstamped_reads
            self._native.close()
            self._native = None
        self._stop_reading()
        if not self._loop.is_closed():
            self._loop.remove_writer(self._fd)
        sock.close()
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.connection_lost(exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """``socket`` and ``peername`` like an asyncio transport; ``default`` for anything else."""
        sock = self._sock
        if sock is None:
            return default
        if name == "socket":
            return sock
        if name == "peername":
            return sock.getpeername()
        return default
