"""One HTTP/1.1 connection, parsed and framed by h11.

h11 parses requests, writes response heads, and tracks keep-alive (``Connection: close`` in a response moves it to
``MUST_CLOSE``). One exception on the hot path: the chunks of a streamed body are framed here
(``{size:x}\\r\\n{data}\\r\\n``, RFC 9112 §7.1) instead of through ``h11.Connection.send(Data(...))``, which costs
about ten times more per event (validation, writer dispatch, a join). h11 keeps no byte count for chunked bodies,
so its state stays exact; the terminating chunk still goes through h11 with ``EndOfMessage``.

Timers, one at a time: the request head must arrive within ``header_timeout_s`` of the connection opening or of its
first byte; a body may not stall longer than that between reads; an idle connection between requests closes after
``keepalive_timeout_s``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import h11

from latscope.lab.errors import payload_too_large
from latscope.lab.http.exchange import Headers, Request, ResponseChannel
from latscope.lab.http.session import JSON_CONTENT_TYPE, Session, error_response, now_ns

#: After refusing a request early (413 before its body arrived), half-close and keep reading and discarding what the
#: client still sends for at most this long: closing a socket with unread bytes makes the kernel send RST, and the
#: client would see "connection reset" instead of the 413 (nginx's ``lingering_close`` does the same, with 5 s).
LINGER_S = 2.0

CLOSE_HEADER = (b"connection", b"close")
RAW_TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _Phase(enum.Enum):
    WAITING = "waiting"  # no byte of the next request yet
    HEAD = "head"  # reading the request line and headers
    BODY = "body"  # reading the body
    BUSY = "busy"  # the handler is answering
    LINGER = "linger"  # refused; draining what the client still sends before closing
    CLOSED = "closed"


class H1Session(Session):
    """An HTTP/1.1 connection: requests one at a time (pipelined bytes wait in h11's buffer)."""

    def _start(self) -> None:
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_header_bytes)
        self._phase = _Phase.WAITING
        self._head: h11.Request | None = None
        self._body: list[bytes] = []
        self._body_len = 0
        self._started_ns = 0
        self._buffered_while_busy = 0
        self._reading_paused = False
        # A fresh connection gets the header timeout from the start: a client that connects and sends nothing is
        # holding a connection slot just like one that sends headers slowly.
        self._arm(self.limits.header_timeout_s, self._on_read_timeout)

    # -- input ---------------------------------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        phase = self._phase
        if phase is _Phase.WAITING:
            self._begin_request()
        elif phase is _Phase.BODY:
            self._arm(self.limits.header_timeout_s, self._on_read_timeout)  # the body keeps moving
        elif phase is _Phase.BUSY:
            # Pipelined bytes of the next request: h11 keeps them until this response is done. Stop reading when a
            # client pushes more than one request head's worth, so it cannot make the lab buffer without bound.
            self._buffered_while_busy += len(data)
            if self._buffered_while_busy > self.limits.max_header_bytes and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
        elif phase is _Phase.LINGER:
            return  # discarded
        elif phase is _Phase.CLOSED:
            return
        self._conn.receive_data(data)
        if self._phase is _Phase.HEAD or self._phase is _Phase.BODY:
            self._process()

    def _begin_request(self) -> None:
        self._phase = _Phase.HEAD
        self._started_ns = now_ns()
        self._arm(self.limits.header_timeout_s, self._on_read_timeout)

    def _process(self) -> None:
        # Each pass consumes one event from h11's finite buffer; the loop ends on NEED_DATA at the latest.
        while self._phase is _Phase.HEAD or self._phase is _Phase.BODY:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse_malformed(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._on_head(event)
            elif isinstance(event, h11.Data):
                self._on_body(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _on_head(self, head: h11.Request) -> None:
        self._head = head
        self._phase = _Phase.BODY
        self.info.http_version = head.http_version.decode("ascii", "replace")
        # h11 enforces the limit only on a head still incomplete in its buffer; one that arrived whole in a single
        # read is measured here, so the limit holds however the bytes were split.
        head_bytes = len(head.target) + sum(len(name) + len(value) + 4 for name, value in head.headers)
        if head_bytes > self.limits.max_header_bytes:
            self._send_error_and_close(
                *error_response(
                    431,
                    f"Request header fields total {head_bytes} bytes; the limit is {self.limits.max_header_bytes}.",
                    "request_header_fields_too_large",
                ),
                linger=True,
            )
            return
        declared = _content_length(head.headers)
        if declared is not None and declared > self.limits.max_body_bytes:
            error = payload_too_large(self.limits.max_body_bytes)
            self._refuse_early(error.status, error.body())
            return
        if self._conn.client_is_waiting_for_100_continue:
            # curl and others wait up to 1 s for this before sending a large body; answering at once keeps upload
            # time out of the server-side time diagnose measures.
            self._write(self._conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        self._arm(self.limits.header_timeout_s, self._on_read_timeout)

    def _on_body(self, data: bytes) -> None:
        self._body.append(data)
        self._body_len += len(data)
        if self._body_len > self.limits.max_body_bytes:
            error = payload_too_large(self.limits.max_body_bytes)
            self._refuse_early(error.status, error.body())

    def _dispatch(self) -> None:
        head = self._head
        assert head is not None
        self._disarm()
        self._phase = _Phase.BUSY
        self.info.requests += 1
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        self._body_len = 0
        request = Request(
            method=head.method.decode("ascii", "replace"),
            target=head.target.decode("latin-1"),
            headers=[(name, value) for name, value in head.headers],
            body=body,
            connection=self.info,
            index_on_connection=self.info.requests,
            started_ns=self._started_ns,
            received_ns=now_ns(),
        )
        self._spawn(request, H1Channel(self))

    # -- after a response ------------------------------------------------------------------------------------------
    def _handler_done(self, request: Request, channel: ResponseChannel) -> None:
        if self.lost or self._phase is _Phase.CLOSED:
            return
        if not channel.finished:
            # The body was cut short (the handler failed mid-stream): closing without the last chunk is how
            # HTTP/1.1 tells the client the response is incomplete.
            self._close_now()
            return
        if self._conn.our_state is h11.MUST_CLOSE or not self.config.keep_alive:
            self._close_now()
            return
        try:
            self._conn.start_next_cycle()
        except h11.LocalProtocolError:
            self._close_now()  # the client never finished its request body; nothing sane can follow
            return
        self._phase = _Phase.WAITING
        self._head = None
        self._buffered_while_busy = 0
        if self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()
        if self._conn.trailing_data[0]:
            self._begin_request()  # a pipelined request is already here
            self._process()
        else:
            self._arm(self.limits.keepalive_timeout_s, self._on_idle_timeout)

    # -- refusals and timeouts ---------------------------------------------------------------------------------------
    def _refuse_malformed(self, exc: h11.RemoteProtocolError) -> None:
        status = exc.error_status_hint
        code = "request_header_fields_too_large" if status == 431 else "malformed_request"
        self._send_error_and_close(*error_response(status, f"Malformed HTTP request: {exc}", code))

    def _refuse_early(self, status: int, body: bytes) -> None:
        """Answer before the request is complete, then linger so the client reads the answer, not a reset."""
        self._send_error_and_close(status, [JSON_CONTENT_TYPE], body, linger=True)

    def _send_error_and_close(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, linger: bool = False
    ) -> None:
        full = [*headers, (b"content-length", str(len(body)).encode()), CLOSE_HEADER]
        try:
            data = self._conn.send(h11.Response(status_code=status, headers=full))
            data = (data or b"") + (self._conn.send(h11.Data(data=body)) or b"")
            data += self._conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:
            data = b"HTTP/1.1 %d Error\r\n" % status + b"".join(b"%b: %b\r\n" % h for h in full) + b"\r\n" + body
        self._write(data)
        if linger:
            self._phase = _Phase.LINGER
            if not self.lost and self.transport.can_write_eof():
                self.transport.write_eof()  # our side is done: the client reads the answer, then EOF, and hangs up
            self._arm(LINGER_S, self._close_now)
        else:
            self._close_now()

    def _on_read_timeout(self) -> None:
        self._timer = None
        if self._phase is _Phase.HEAD or self._phase is _Phase.BODY:
            self._write(RAW_TIMEOUT_RESPONSE)  # RFC 9110 §15.5.9: tell the client why before closing
        self._close_now()

    def _on_idle_timeout(self) -> None:
        self._timer = None
        self._close_now()  # RFC 9112 §9.8: an idle persistent connection may be closed at any time

    def _close_now(self) -> None:
        self._phase = _Phase.CLOSED
        self.close()

    def _write(self, data: bytes | None) -> None:
        if data and not self.lost:
            self.transport.write(data)


class H1Channel(ResponseChannel):
    """The response side of one HTTP/1.1 request."""

    def __init__(self, session: H1Session) -> None:
        self._session = session
        self._transport = session.transport
        self._conn = session._conn
        self._keep_alive = session.config.keep_alive
        # RFC 9110 §9.3.2: a response to HEAD carries the head only (h11 refuses a body for it).
        self._head_only = session._head is not None and session._head.method == b"HEAD"
        self._chunked = False
        self._finished = False
        self.headers_sent_ns: int | None = None
        self.body_bytes = 0
        self.write_calls = 0

    @property
    def closed(self) -> bool:
        return self._session.lost

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def paused(self) -> bool:
        return self._session.write_paused

    def _head(self, status: int, headers: Headers, extra: list[tuple[bytes, bytes]]) -> bytes:
        full = [*headers, *extra]
        if not self._keep_alive:
            full.append(CLOSE_HEADER)
        data = self._conn.send(h11.Response(status_code=status, headers=full))
        self.headers_sent_ns = now_ns()
        return data or b""

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        if self._finished or self._session.lost:
            self._finished = True
            return
        data = self._head(status, headers, [(b"content-length", str(len(body)).encode())])
        if body and not self._head_only:
            data += self._conn.send(h11.Data(data=body)) or b""
        data += self._conn.send(h11.EndOfMessage()) or b""
        self.body_bytes += len(body)
        self._finished = True
        self._transport.write(data)

    def start(self, status: int, headers: Headers) -> None:
        if self._session.lost:
            return
        head = self._head(status, headers, [(b"transfer-encoding", b"chunked")])
        # Mirror h11's choice: it drops chunked coding for HTTP/1.0 peers and delimits the body by closing.
        version = self._conn.their_http_version
        self._chunked = version is not None and version >= b"1.1"
        self._transport.write(head)

    def write(self, data: bytes) -> None:
        if not data or self._session.lost:
            return
        self.write_calls += 1
        self.body_bytes += len(data)
        if self._chunked:
            self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._transport.write(data)

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._session.lost:
            return
        tail = self._conn.send(h11.EndOfMessage())
        if tail:
            self._transport.write(tail)

    async def drain(self) -> None:
        await self._session.wait_writable()


def _content_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 has already rejected a malformed Content-Length
    return None
