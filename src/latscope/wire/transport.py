"""The socket side of a connection: an asyncio Protocol that stamps every read and, for https, runs TLS itself.

Every ``data_received`` call is one *read*: the first thing it does is take ``time.monotonic_ns()``, so the stamp is
when the event loop handed the bytes over, before any parsing. For https the bytes are decrypted here (TLS through
``SSLContext.wrap_bio`` and two memory BIOs, which is what lets the client offer a saved session) and the receiver
gets the plaintext of that read with the read's stamp; a read that only completed part of a TLS record delivers
nothing, and the bytes count towards the read that completes it.

With kernel stamps (:mod:`latscope.wire.rawsock`) no asyncio transport reads the socket: a reader on the loop calls
:meth:`WireProtocol.stamped_data_received` with the kernel's receive stamp and the user-space stamp of the same read,
and everything else (TLS, pending reads, the receiver) is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from time import monotonic_ns
from typing import Protocol, cast

from latscope.wire.tcpinfo import TCP_QUICKACK, set_delayed_ack, set_quickack

#: plaintext asked from OpenSSL per ``SSLObject.read`` call; a TLS record holds at most 16 KiB so one call
#: usually drains one record, and the loop below drains the rest.
_TLS_READ_BYTES = 262_144


class Receiver(Protocol):
    """What sits on top of a :class:`WireProtocol`: an HTTP/1.1 or HTTP/2 connection."""

    def data_received(self, data: bytes, at_ns: int, user_ns: int | None = None) -> None:
        """Application bytes of one read, stamped ``at_ns`` (monotonic ns): the kernel's receive stamp when
        ``user_ns`` (the user-space stamp of the same read) is given, else when the read was handed over."""

    def eof_received(self) -> None:
        """The peer closed its sending side (TCP FIN or TLS close_notify)."""

    def connection_lost(self, exc: BaseException | None) -> None:
        """The connection is gone; ``exc`` None when it closed cleanly."""


class WireProtocol(asyncio.Protocol):
    """One TCP connection, optionally with TLS, delivering stamped reads to a :class:`Receiver`.

    Reads that arrive before a receiver is attached (bytes a server sends right after the handshake) are kept with
    their stamps and replayed by :meth:`attach`.
    """

    def __init__(self, sock: socket.socket, *, quickack: bool = False, delayed_ack: bool = False) -> None:
        self.sock = sock  #: the real socket (for TCP_INFO / TCP_QUICKACK; the transport owns it)
        self.quickack = quickack
        self.delayed_ack = delayed_ack
        #: the TCP_QUICKACK value set again after every read (1: ACK at once, 0: delayed-ACK mode), None: leave the
        #: kernel's choice alone. One attribute test per read when neither mode is on.
        self._ack_after_read: int | None = None
        if TCP_QUICKACK is not None and (quickack or delayed_ack):
            self._ack_after_read = 1 if quickack else 0
        self.transport: asyncio.Transport | None = None
        self.receiver: Receiver | None = None
        self.ssl_object: ssl.SSLObject | None = None
        self.closed = False  #: connection_lost has run
        self.eof = False  #: the peer closed its side
        self.lost_exc: BaseException | None = None
        self._pending: list[tuple[bytes, int, int | None]] = []
        self._incoming: ssl.MemoryBIO | None = None
        self._outgoing: ssl.MemoryBIO | None = None
        self._handshake: asyncio.Future[None] | None = None
        self.handshake_done_ns: int | None = None  #: stamp of the read that completed the TLS handshake
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # --- asyncio.Protocol -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        # pause_writing whenever anything is still buffered, so drain() returns only once every request byte has
        # been handed to the kernel: that moment is send_end, and the upload time of a large body is measured
        self.transport.set_write_buffer_limits(high=0, low=0)

    def data_received(self, data: bytes) -> None:
        at_ns = monotonic_ns()  # first thing: this stamp is the measurement
        # the body of stamped_data_received, inlined: one call less on every user-stamped read (the hot path)
        ack = self._ack_after_read
        if ack is not None:
            if ack:
                set_quickack(self.sock)
            else:
                set_delayed_ack(self.sock)
        if self.ssl_object is not None:
            data = self._decrypt(data, at_ns, None)
            if not data:
                return
        receiver = self.receiver
        if receiver is None:
            self._pending.append((data, at_ns, None))
        else:
            receiver.data_received(data, at_ns)

    def stamped_data_received(self, data: bytes, at_ns: int, user_ns: int | None) -> None:
        """One read stamped ``at_ns`` (monotonic ns); ``user_ns`` is the user-space stamp when ``at_ns`` is the
        kernel's, else None."""
        ack = self._ack_after_read
        if ack is not None:
            if ack:
                set_quickack(self.sock)
            else:
                set_delayed_ack(self.sock)
        if self.ssl_object is not None:
            data = self._decrypt(data, at_ns, user_ns)
            if not data:
                return
        receiver = self.receiver
        if receiver is None:
            self._pending.append((data, at_ns, user_ns))
        else:
            receiver.data_received(data, at_ns, user_ns)

    def eof_received(self) -> bool | None:
        self.eof = True
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(ConnectionError("connection closed during the TLS handshake"))
        if self.receiver is not None:
            self.receiver.eof_received()
        return None  # let the transport close itself

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if exc is None:
            exc = self.lost_exc  # a TLS error we aborted on reads better than "closed by the server"
        self.lost_exc = exc
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(exc or ConnectionError("connection closed during the TLS handshake"))
        self._wake_writers(exc or ConnectionError("connection closed"))
        receiver, self.receiver = self.receiver, None
        if receiver is not None:
            receiver.connection_lost(exc)
        # the transport and the receiver both point back at this protocol: let reference counting free the three
        self.transport = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(None)

    # --- used by the HTTP layer ---------------------------------------------------------------------------------

    def attach(self, receiver: Receiver) -> None:
        """Start delivering reads to ``receiver``, replaying any that arrived before."""
        self.receiver = receiver
        pending, self._pending = self._pending, []
        for data, at_ns, user_ns in pending:
            receiver.data_received(data, at_ns, user_ns)
        if self.eof:
            receiver.eof_received()
        if self.closed:
            self.receiver = None
            receiver.connection_lost(self.lost_exc)

    def write(self, data: bytes) -> None:
        """Send ``data`` (encrypted first over TLS)."""
        if self.transport is None or self.closed:
            raise ConnectionError("connection closed")
        if self.ssl_object is not None:
            self.ssl_object.write(data)
            self._flush_tls()
        else:
            self.transport.write(data)
        if self.quickack:
            # re-arm after sending too: the response's first segment is the read that matters most
            set_quickack(self.sock)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self.closed:
            raise self.lost_exc or ConnectionError("connection closed")
        if not self._paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    @property
    def write_pending(self) -> bool:
        """True while written bytes wait in the transport's buffer (the kernel's send buffer was full)."""
        return self._paused

    @property
    def write_buffer_size(self) -> int:
        """Bytes written and still in the transport's own buffer, not yet handed to the kernel."""
        transport = self.transport
        return 0 if transport is None or transport.is_closing() else transport.get_write_buffer_size()

    @property
    def usable(self) -> bool:
        """True while the connection can carry another request (not closed by either side)."""
        return not (self.closed or self.eof or self.transport is None or self.transport.is_closing())

    def close(self) -> None:
        """Close politely: TLS close_notify when TLS is up, then FIN."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.ssl_object is not None and self._handshake is not None and self._handshake.done():
            # SSLWantReadError: our close_notify is queued; not waiting for the peer's is fine
            with contextlib.suppress(ssl.SSLError):
                self.ssl_object.unwrap()
            self._flush_tls()
        self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (no close_notify, buffered data discarded)."""
        if self.transport is not None:
            self.transport.abort()

    # --- TLS ----------------------------------------------------------------------------------------------------

    def start_tls(
        self, context: ssl.SSLContext, server_hostname: str | None, session: ssl.SSLSession | None
    ) -> asyncio.Future[None]:
        """Begin the TLS handshake, offering ``session`` for resumption; the future completes with the handshake."""
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname, session=session
        )
        self._handshake = asyncio.get_running_loop().create_future()
        self._do_handshake()
        return self._handshake

    def _do_handshake(self) -> bool:
        assert self.ssl_object is not None and self._handshake is not None
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self._flush_tls()
            return False
        except (ssl.SSLError, OSError) as exc:
            self._flush_tls()  # send the alert so the server logs why
            if not self._handshake.done():
                # without its traceback: that holds this frame, hence this protocol, hence the future (a cycle)
                self._handshake.set_exception(exc.with_traceback(None))
            if self.transport is not None:
                self.transport.close()
            return False
        self.handshake_done_ns = monotonic_ns()
        self._flush_tls()
        if not self._handshake.done():
            self._handshake.set_result(None)
        return True

    def _decrypt(self, data: bytes, at_ns: int, user_ns: int | None) -> bytes:
        """Feed one read's ciphertext; return the plaintext it completed (b"" when none)."""
        ssl_object = self.ssl_object
        incoming = self._incoming
        assert ssl_object is not None and incoming is not None and self._handshake is not None
        incoming.write(data)
        if not self._handshake.done() and not self._do_handshake():
            return b""
        parts: list[bytes] = []
        try:
            while True:
                chunk = ssl_object.read(_TLS_READ_BYTES)
                if not chunk:
                    break
                parts.append(chunk)
                if not incoming.pending and not ssl_object.pending():
                    break
        except ssl.SSLWantReadError:
            pass  # the rest of a record is still on its way
        except ssl.SSLZeroReturnError:
            self.eof = True  # close_notify: delivered after the plaintext below
        except ssl.SSLError as exc:
            self.lost_exc = exc.with_traceback(None)  # kept on self: its traceback would make a cycle
            if self.transport is not None:
                self.transport.abort()
        if self._outgoing is not None and self._outgoing.pending:
            self._flush_tls()  # post-handshake messages (key update acks)
        if self.eof and self.receiver is not None:
            plain = b"".join(parts)
            if plain:
                self.receiver.data_received(plain, at_ns, user_ns)
            self.receiver.eof_received()
            return b""
        if not parts:
            return b""
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _flush_tls(self) -> None:
        outgoing = self._outgoing
        if outgoing is not None and outgoing.pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(outgoing.read())

    def _wake_writers(self, exc: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)
