"""HTTP/1.1 over one connection, framed by h11: one request at a time, keep-alive as the server allows.

The read path (:meth:`HTTP11Connection.data_received`) is the client's hot loop: record the read, hand the bytes to
h11, pass each ``Data`` event straight to the exchange with the read's stamp and index.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic_ns

import h11

from latscope.timeline.model import ConnectionInfo, Phase, Read
from latscope.wire.errors import WireError, lost_error, make_error, timeout_error
from latscope.wire.exchange import Exchange
from latscope.wire.models import Origin
from latscope.wire.tcpinfo import read_tcp_info
from latscope.wire.transport import WireProtocol

_Data = h11.Data
_Response = h11.Response
_EndOfMessage = h11.EndOfMessage
_NEED_DATA = h11.NEED_DATA
_PAUSED = h11.PAUSED
_new_tuple = tuple.__new__  # builds a Read without NamedTuple's Python-level __new__ (hot path)

#: largest response head h11 accepts (its default is 16 KiB; some gateways send long header sets).
MAX_RESPONSE_HEAD_BYTES = 256 * 1024


def _version(raw: bytes) -> str:
    return "HTTP/" + raw.decode("ascii", "replace")


class HTTP11Connection:
    """One HTTP/1.1 connection. The pool hands it to one request at a time; ``on_release`` is called when it can
    take another request or has closed."""

    multiplexed = False

    def __init__(self, origin: Origin, protocol: WireProtocol, info: ConnectionInfo) -> None:
        self.origin = origin
        self.protocol = protocol
        self.info = info
        self.requests = 0
        self.on_release: Callable[[HTTP11Connection], None] | None = None
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_HEAD_BYTES)
        self._exchange: Exchange | None = None
        self._reserved = False
        self._closed = False
        protocol.attach(self)

    # --- pool interface -----------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self._closed and not self.protocol.closed

    @property
    def usable(self) -> bool:
        return not self._closed and self.protocol.usable and self._h11.our_state is h11.IDLE

    @property
    def available(self) -> bool:
        return not self._reserved and self.usable

    def reserve(self) -> None:
        self._reserved = True
        self.requests += 1

    async def send(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        exchange: Exchange,
        send_timeout_s: float,
    ) -> None:
        t = exchange.timeline
        self._exchange = exchange
        conn = self._h11
        try:
            head = conn.send(h11.Request(method=method, target=target, headers=headers))
            t.send_start_ns = monotonic_ns()
            self.protocol.write(head)
            t.headers_sent_ns = monotonic_ns()
            tail = conn.send(h11.Data(data=body)) if body else b""
            tail += conn.send(h11.EndOfMessage())
            if tail:
                self.protocol.write(tail)
            if self.protocol.write_pending:  # skip the await (a loop iteration) when everything went out at once
                await asyncio.wait_for(self.protocol.drain(), send_timeout_s)
        except TimeoutError:
            raise timeout_error(
                Phase.SEND, f"writing the request took longer than {send_timeout_s:g} s ({len(body)} body bytes)"
            ) from None
        except h11.LocalProtocolError as exc:
            raise make_error(f"invalid request: {exc}", phase=Phase.SEND, kind="invalid-request") from None
        except OSError as exc:
            raise lost_error(exc, Phase.SEND, "while sending the request") from None
        finally:
            t.send_end_ns = monotonic_ns()

    def abandon(self, exchange: Exchange) -> None:
        if self._exchange is exchange:
            self._exchange = None
            self._close()

    def close(self) -> None:
        self._close()

    # --- Receiver (called from WireProtocol) --------------------------------------------------------------------

    def data_received(self, data: bytes, at_ns: int) -> None:
        ex = self._exchange
        if ex is None:
            # bytes while no request is out: the server broke the protocol or is closing; never reuse this one
            self._close()
            return
        reads = ex.reads
        read_index = len(reads)
        reads.append(_new_tuple(Read, (at_ns, len(data))))
        if read_index == 0:
            ex.timeline.first_byte_ns = at_ns
        try:
            self._h11.receive_data(data)
            self._process(ex, at_ns, read_index)
        except h11.RemoteProtocolError as exc:
            self._protocol_error(ex, exc, at_ns, eof=False)
        except Exception as exc:  # a bug must fail the request with a message, not kill the transport silently
            self._internal_error(ex, exc, at_ns)

    def eof_received(self) -> None:
        ex = self._exchange
        if ex is None:
            self._close()
            return
        at_ns = monotonic_ns()
        try:
            self._h11.receive_data(b"")
            self._process(ex, at_ns, len(ex.reads) - 1)
        except h11.RemoteProtocolError as exc:
            self._protocol_error(ex, exc, at_ns, eof=True)
        except Exception as exc:
            self._internal_error(ex, exc, at_ns)

    def connection_lost(self, exc: BaseException | None) -> None:
        ex = self._exchange
        if ex is not None and not ex.finished:
            ex.fail(self._lost_error(ex, exc), monotonic_ns())
        self._exchange = None
        self._mark_closed()

    # --- internals ----------------------------------------------------------------------------------------------

    def _process(self, ex: Exchange, at_ns: int, read_index: int) -> None:
        next_event = self._h11.next_event
        # The body pieces of one read (one per HTTP chunk: servers frame each event as a chunk) go to the exchange
        # joined: they share the read's stamp anyway, and one decoder call per read instead of one per event is
        # most of what the decoding costs.
        pieces: list[bytes] = []
        while True:
            event = next_event()
            if isinstance(event, _Data):
                pieces.append(event.data)
                continue
            if pieces:
                ex.body(pieces[0] if len(pieces) == 1 else b"".join(pieces), at_ns, read_index)
                pieces = []
            if event is _NEED_DATA or event is _PAUSED:
                break
            if isinstance(event, _Response):
                self._on_response(ex, event, at_ns)
            elif isinstance(event, (_EndOfMessage, h11.ConnectionClosed)):
                # ConnectionClosed comes after a message delimited by the close; an unfinished one raises instead
                self._on_end(ex, at_ns)
                return
            # InformationalResponse (1xx): nothing to record
        if ex.finished and self._exchange is ex:
            # the exchange failed while the body was still coming (e.g. invalid JSON): this connection is not
            # at a message boundary, so it cannot carry another request
            self._exchange = None
            self._close()

    def _on_response(self, ex: Exchange, event: h11.Response, at_ns: int) -> None:
        self.info.http_version = _version(event.http_version)
        if ex.timeline.connection is not None:
            ex.timeline.connection.http_version = self.info.http_version
            ex.timeline.connection.tcp_info_at_headers = read_tcp_info(self.protocol.sock)
        headers = [(k.decode("ascii", "replace"), v.decode("latin-1")) for k, v in event.headers]
        ex.response(event.status_code, headers, at_ns)

    def _on_end(self, ex: Exchange, at_ns: int) -> None:
        if ex.timeline.connection is not None:
            ex.timeline.connection.tcp_info_at_end = read_tcp_info(self.protocol.sock)
        ex.end(at_ns)
        self._exchange = None
        conn = self._h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()  # keep-alive: ready for the next request
            self._reserved = False
            if self.on_release is not None:
                self.on_release(self)
        else:
            self._close()  # Connection: close, HTTP/1.0, or a body delimited by EOF

    def _protocol_error(self, ex: Exchange, exc: h11.RemoteProtocolError, at_ns: int, *, eof: bool) -> None:
        if eof and ex.timeline.status is not None:
            err = make_error(
                f"the server closed the connection before the response body ended ({exc}); "
                f"{len(ex.events)} events, {ex.body_bytes} body bytes received",
                phase=Phase.STREAM,
                kind="truncated",
            )
        elif eof:
            err = lost_error(None, Phase.HEADERS, "before sending a complete response head")
        else:
            phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
            err = make_error(f"invalid HTTP/1.1 response: {exc}", phase=phase, kind="protocol")
        ex.fail(err, at_ns)
        self._exchange = None
        self._close()

    def _internal_error(self, ex: Exchange, exc: Exception, at_ns: int) -> None:
        phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
        ex.fail(make_error(f"internal error: {exc!r}", phase=phase, kind="internal"), at_ns)
        self._exchange = None
        self._close()

    def _lost_error(self, ex: Exchange, exc: BaseException | None) -> WireError:
        t = ex.timeline
        if t.send_end_ns is None:
            return lost_error(exc, Phase.SEND, "while sending the request")
        if t.status is None:
            return lost_error(exc, Phase.HEADERS, "before sending the response head")
        return lost_error(
            exc, Phase.STREAM, f"while reading the stream (after {len(ex.events)} events, {ex.body_bytes} body bytes)"
        )

    def _close(self) -> None:
        if not self._closed:
            self.protocol.close()
        self._mark_closed()

    def _mark_closed(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reserved = False
        if self.on_release is not None:
            self.on_release(self)
