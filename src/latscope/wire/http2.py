"""HTTP/2 over one connection, framed by h2: many requests at once, one stream each.

Reads belong to the connection, not to a stream, so each read is recorded in the timeline of every stream that got
a frame from it (``Read.nbytes`` is the size of the whole read, frames of other streams included); a read that only
carried connection frames (SETTINGS, PING, WINDOW_UPDATE) is recorded nowhere.

GOAWAY (RFC 9113 §6.8) ends the connection for new requests only: the streams up to its last stream id were taken by
the server and may still be answered, those above it were never processed and fail at once (kind ``goaway``; safe
to retry). h2 itself treats a received GOAWAY as the end of the connection (see :class:`_ClientStateMachine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from time import monotonic_ns

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Read
from latscope.wire.errors import WireError, make_error
from latscope.wire.exchange import Exchange
from latscope.wire.models import Origin
from latscope.wire.phase import Sending, protocol_error
from latscope.wire.request import COALESCE_BODY_BYTES, Outgoing
from latscope.wire.tcpinfo import read_tcp_info
from latscope.wire.transport import WireProtocol

_DataReceived = h2.events.DataReceived
_ResponseReceived = h2.events.ResponseReceived
_StreamEnded = h2.events.StreamEnded
_new_tuple = tuple.__new__
_CLIENT_OPEN = h2.connection.ConnectionState.CLIENT_OPEN
_RECV_GOAWAY = h2.connection.ConnectionInputs.RECV_GOAWAY
#: h2 refusing to frame the request (a state or header it does not allow)
_h2_error = protocol_error(h2.exceptions.H2Error, "HTTP/2 error while sending")

#: our receive window, per stream and for the connection (bytes). The protocol default of 64 KiB would make a fast
#: stream wait for WINDOW_UPDATE round trips, which is the client throttling the server, not a server bottleneck.
RECEIVE_WINDOW_BYTES = 16 * 1024 * 1024

#: connection-specific headers HTTP/2 forbids (RFC 9113 §8.2.2); ``host`` becomes ``:authority``.
_DROPPED_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"})


class _ClientStateMachine(h2.connection.H2ConnectionStateMachine):
    """h2's connection state machine, but a received GOAWAY leaves an open client connection open.

    h2 moves the connection to CLOSED on GOAWAY and from then on refuses every frame, so the answers to the streams
    the GOAWAY still covers are lost with "Invalid input ConnectionInputs.RECV_HEADERS in state
    ConnectionState.CLOSED" (python-hyper/h2#1181). nginx with keep-alive off sends exactly that: GOAWAY naming the
    request's own stream, then the response. RFC 9113 §6.8 lets those streams complete, so the connection stays in
    CLIENT_OPEN here: frames, WINDOW_UPDATEs and RST_STREAMs for them keep flowing, and :class:`HTTP2Connection`
    itself opens no new stream after a GOAWAY (``_goaway``) and closes once the covered streams are done. Every other
    transition is h2's own.
    """

    def process_input(self, input_: h2.connection.ConnectionInputs) -> list[h2.events.Event]:
        if input_ is _RECV_GOAWAY and self.state is _CLIENT_OPEN:
            return []
        return super().process_input(input_)


class HTTP2Connection:
    """One HTTP/2 connection carrying any number of concurrent requests (up to the server's stream limit)."""

    multiplexed = True

    def __init__(self, origin: Origin, protocol: WireProtocol, info: ConnectionInfo) -> None:
        self.origin = origin
        self.protocol = protocol
        self.info = info
        self.requests = 0
        self.on_release: Callable[[HTTP2Connection], None] | None = None
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self._h2.state_machine = _ClientStateMachine()  # still IDLE: nothing was sent or received yet
        self._streams: dict[int, Exchange] = {}
        self._reserved = 0
        self._closed = False
        self._goaway = False
        self._window_waiters: list[asyncio.Future[None]] = []
        self._h2.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW_BYTES}
        )
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(RECEIVE_WINDOW_BYTES - 65_535)
        protocol.attach(self)
        self._flush()

    # --- pool interface -----------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self._closed and not self.protocol.closed

    @property
    def usable(self) -> bool:
        return not self._closed and not self._goaway and self.protocol.usable

    @property
    def available(self) -> bool:
        limit = self._h2.remote_settings.max_concurrent_streams
        return self.usable and self._reserved < limit

    def reserve(self) -> None:
        self._reserved += 1
        self.requests += 1

    async def send(self, request: Outgoing, exchange: Exchange, send_timeout_s: float) -> None:
        method, target, headers, body, _ = request
        t = exchange.timeline
        conn = self._h2
        origin = self.origin
        fields = [(":method", method), (":scheme", origin.scheme), (":authority", origin.authority), (":path", target)]
        fields += [(name.lower(), value) for name, value in headers if name.lower() not in _DROPPED_HEADERS]
        if self._goaway:
            # the GOAWAY (or the close) came after the pool handed this connection out: nothing was sent
            self._unreserve()
            raise make_error(
                "the server ended the HTTP/2 connection (GOAWAY or close) before the request was sent; "
                "it was not processed and is safe to retry",
                phase=Phase.SEND,
                kind=ErrorKind.GOAWAY,
            )
        with Sending(t, send_timeout_s, len(body), _h2_error) as span:
            stream_id = conn.get_next_available_stream_id()
            self._streams[stream_id] = exchange
            span.begin()
            conn.send_headers(stream_id, fields, end_stream=not body)
            sent = 0
            if body and len(body) <= COALESCE_BODY_BYTES:
                # HEADERS and the DATA the flow-control windows allow go out in one write
                sent = self._queue_data(stream_id, body, 0)
                if sent == len(body):
                    conn.end_stream(stream_id)
            self._flush()
            span.headers_sent()
            # asyncio.timeout, not wait_for: wait_for would run each of these as a task of its own
            if sent < len(body):
                async with asyncio.timeout(send_timeout_s):
                    await self._send_body(stream_id, body, sent)
            if self.protocol.write_pending:  # skip the await (a loop iteration) when everything went out at once
                async with asyncio.timeout(send_timeout_s):
                    await self.protocol.drain()

    def abandon(self, exchange: Exchange) -> None:
        for stream_id, ex in list(self._streams.items()):
            if ex is exchange:
                self._end_stream(stream_id)
                try:
                    self._h2.reset_stream(stream_id)
                    self._flush()
                except h2.exceptions.H2Error:
                    pass  # the stream already closed on the server's side

    def close(self) -> None:
        if not self._closed:
            try:
                self._h2.close_connection()
                self._flush()
            except h2.exceptions.H2Error:
                pass
            self.protocol.close()
        self._mark_closed(None)

    # --- Receiver -----------------------------------------------------------------------------------------------

    def data_received(self, data: bytes, at_ns: int, user_ns: int | None = None) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self._fail_all(
                make_error(f"invalid HTTP/2 data: {exc}", phase=Phase.STREAM, kind=ErrorKind.PROTOCOL), at_ns
            )
            self.close()
            return
        streams = self._streams
        touched: dict[int, int] = {}  # stream id → index of this read in that stream's timeline
        nbytes = len(data)
        for event in events:
            if isinstance(event, _DataReceived):
                stream_id = event.stream_id
                ex = streams.get(stream_id)
                if ex is not None:
                    index = touched.get(stream_id)
                    if index is None:
                        index = touched[stream_id] = self._record_read(ex, at_ns, nbytes, user_ns)
                    ex.body(event.data, at_ns, index)
                self._h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
            elif isinstance(event, _ResponseReceived):
                ex = streams.get(event.stream_id)
                if ex is not None:
                    if event.stream_id not in touched:
                        touched[event.stream_id] = self._record_read(ex, at_ns, nbytes, user_ns)
                    self._on_response(ex, event, at_ns)
            elif isinstance(event, h2.events.TrailersReceived):
                ex = streams.get(event.stream_id)
                if ex is not None:
                    if event.stream_id not in touched:
                        touched[event.stream_id] = self._record_read(ex, at_ns, nbytes, user_ns)
                    ex.trailers(_decode_fields(event.headers))
            elif isinstance(event, _StreamEnded):
                ex = streams.get(event.stream_id)
                if ex is not None:
                    if ex.timeline.connection is not None:
                        ex.timeline.connection.tcp_info_at_end = read_tcp_info(self.protocol.sock)
                    ex.end(at_ns)
                    self._end_stream(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                ex = streams.get(event.stream_id)
                if ex is not None:
                    phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
                    code = getattr(event.error_code, "name", event.error_code)
                    err = make_error(f"the server reset the HTTP/2 stream ({code})", phase=phase, kind=ErrorKind.RESET)
                    ex.fail(err, at_ns)
                    self._end_stream(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._on_goaway(event, at_ns)
            elif isinstance(event, h2.events.WindowUpdated):
                self._wake_senders()
            elif isinstance(event, h2.events.RemoteSettingsChanged):
                self._wake_senders()
                if self.on_release is not None:
                    self.on_release(self)  # the server's stream limit may have grown: the pool may hand it out again
        # drop exchanges that failed mid-body (e.g. invalid JSON) so later frames are only acknowledged
        for stream_id in touched:
            ex = streams.get(stream_id)
            if ex is not None and ex.finished:
                self.abandon(ex)
        self._flush()

    def eof_received(self) -> None:
        self._goaway = True

    def connection_lost(self, exc: BaseException | None) -> None:
        at_ns = monotonic_ns()
        for ex in list(self._streams.values()):
            ex.fail(ex.lost_error(exc), at_ns)
        self._streams.clear()
        self._mark_closed(exc)

    # --- internals ----------------------------------------------------------------------------------------------

    def _record_read(self, ex: Exchange, at_ns: int, nbytes: int, user_ns: int | None) -> int:
        reads = ex.reads
        index = len(reads)
        reads.append(_new_tuple(Read, (at_ns, nbytes, user_ns)))
        if index == 0:
            ex.timeline.first_byte_ns = at_ns
        return index

    def _on_response(self, ex: Exchange, event: h2.events.ResponseReceived, at_ns: int) -> None:
        status = 0
        headers: list[tuple[str, str]] = []
        for key, val in _decode_fields(event.headers, pseudo=True):
            if key == ":status":
                status = int(val)
            elif not key.startswith(":"):
                headers.append((key, val))
        if ex.timeline.connection is not None:
            ex.timeline.connection.tcp_info_at_headers = read_tcp_info(self.protocol.sock)
        ex.response(status, headers, at_ns)

    def _queue_data(self, stream_id: int, body: bytes, pos: int) -> int:
        """Queue DATA frames of ``body`` from ``pos`` as far as the flow-control windows allow; the new position."""
        conn = self._h2
        view = memoryview(body)
        while pos < len(body):
            window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
            if window <= 0:
                break
            end = min(pos + window, len(body))
            conn.send_data(stream_id, bytes(view[pos:end]))
            pos = end
        return pos

    async def _send_body(self, stream_id: int, body: bytes, pos: int) -> None:
        """Send ``body`` from ``pos`` frame by frame, waiting for window updates and for the socket to drain."""
        conn = self._h2
        while pos < len(body):
            sent = self._queue_data(stream_id, body, pos)
            if sent == pos:
                waiter = asyncio.get_running_loop().create_future()
                self._window_waiters.append(waiter)
                await waiter
                continue
            pos = sent
            self._flush()
            await self.protocol.drain()
        conn.end_stream(stream_id)
        self._flush()

    def _on_goaway(self, event: h2.events.ConnectionTerminated, at_ns: int) -> None:
        """No new request may go on this connection; streams above the last stream id were never processed (RFC 9113
        §6.8) and fail now; the others are answered as usual and the connection closes after the last of them."""
        self._goaway = True
        last = event.last_stream_id if event.last_stream_id is not None else 0
        code = getattr(event.error_code, "name", event.error_code)
        for stream_id, ex in list(self._streams.items()):
            if stream_id > last:
                phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
                message = (
                    f"the server sent GOAWAY ({code}, last stream {last}) before processing this request "
                    f"(stream {stream_id}); it is safe to retry"
                )
                ex.fail(make_error(message, phase=phase, kind=ErrorKind.GOAWAY), at_ns)
                self._end_stream(stream_id)
        if self.on_release is not None:
            self.on_release(self)  # the pool stops handing it out now, not when its last stream ends
        if not self._streams:
            self.close()

    def _end_stream(self, stream_id: int) -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._unreserve()

    def _unreserve(self) -> None:
        """A reserved request slot is free again (its stream ended, or its request was never sent)."""
        self._reserved = max(0, self._reserved - 1)
        if self.on_release is not None:
            self.on_release(self)
        if self._goaway and not self._streams:
            self.close()

    def _fail_all(self, error: WireError, at_ns: int) -> None:
        for ex in list(self._streams.values()):
            ex.fail(error, at_ns)
        self._streams.clear()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and self.protocol.usable:
            self.protocol.write(data)

    def _wake_senders(self) -> None:
        waiters, self._window_waiters = self._window_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _mark_closed(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        for waiter in self._window_waiters:
            if not waiter.done():
                waiter.set_exception(exc or ConnectionError("connection closed"))
        self._window_waiters = []
        if self.on_release is not None:
            self.on_release(self)


def _decode_fields(
    fields: Iterable[tuple[bytes | str, bytes | str]] | None, *, pseudo: bool = False
) -> list[tuple[str, str]]:
    """Header fields as h2 reports them (bytes, as ``header_encoding=None`` asks) as ``(name, value)`` strings: names
    ASCII (HPACK sends them lower-case, RFC 9113 §8.2.1), values latin-1 like HTTP/1.1's. Pseudo-headers are kept
    only when ``pseudo``."""
    out: list[tuple[str, str]] = []
    for name, value in fields or ():
        key = name.decode("ascii", "replace") if isinstance(name, bytes) else name
        if not pseudo and key.startswith(":"):
            continue
        out.append((key, value.decode("latin-1") if isinstance(value, bytes) else value))
    return out
