"""HTTP/1.1 over one connection: one request at a time, keep-alive as the server allows.

Requests are serialised by h11 (a fresh ``h11.Connection`` per request, used for nothing else). h11 validating and
writing a head is the largest single cost of a short request on the client (benchmarks/client_overhead.py), so a
header set sent more than once (:class:`~latscope.wire.request.HeaderSet`: every request of a load test) has its
head written by h11 once, with placeholder values in the two per-request slots (Content-Length, traceparent), and
each request joins the pieces around its own values (:class:`_HeadTemplate`). A small body goes out in the same
write as the head.

Responses are parsed by llhttp through ``httptools.HttpResponseParser``, the C parser uvicorn uses: the receive path
is the client's hot loop, and h11's chunked reader runs Python code per HTTP chunk, i.e. per event, since servers
frame each event as one chunk.

The read path (:meth:`HTTP11Connection.data_received`): record the read, hand all its bytes to llhttp in one
``feed_data`` call, then give the exchange the head (if it completed in this read), the body bytes of the read
joined into one piece (one decoder call per read, whatever the number of chunks), and the end of the message.
llhttp reports body pieces through ``on_body``, which is bound straight to ``list.append``: no Python code runs
per chunk.

llhttp has no end-of-input call in httptools, so the end of a body delimited by the connection closing
(RFC 9112 §6.3, rule 8: no Content-Length, no chunked coding) is decided here from the head: see
:meth:`HTTP11Connection.eof_received`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic_ns

import h11
import httptools

from latscope.timeline.model import ConnectionInfo, ErrorKind, Phase, Read
from latscope.wire.errors import lost_error, make_error
from latscope.wire.exchange import Exchange
from latscope.wire.models import Origin
from latscope.wire.phase import Sending, protocol_error
from latscope.wire.request import COALESCE_BODY_BYTES, HeaderSet, Outgoing
from latscope.wire.tcpinfo import read_tcp_info
from latscope.wire.transport import WireProtocol

_new_tuple = tuple.__new__  # builds a Read without NamedTuple's Python-level __new__ (hot path)
_ParserError = httptools.HttpParserError  # every httptools parse error derives from it
#: h11 refusing to write the request (an invalid header field, method or target)
_invalid_request = protocol_error(h11.LocalProtocolError, "invalid request", ErrorKind.INVALID_REQUEST)

#: largest response head accepted (status line and headers; some gateways send long header sets), and the limit of
#: a chunked body's trailer section too. llhttp itself has no limit, and a server that never ends its head must not
#: grow the client's memory without bound.
MAX_RESPONSE_HEAD_BYTES = 256 * 1024


#: placeholder values h11 writes into a header set's slots; the head it wrote is split where they are. The length is
#: the longest Content-Length h11 accepts (20 digits): no body the client sends has it.
_LENGTH_MARK = "98765432109876543210"
_TRACE_MARK = "00-5107ba11ce0f1a7e5c09e5107ba11ce0-5107ba11ce0f1a7e-01"
_LENGTH_SLOT = 0
_TRACE_SLOT = 1


class _HeadTemplate:
    """The head h11 wrote for one header set and request line, cut at its slots: ``parts`` are the bytes between
    them, ``slots`` say which value goes in each gap (:data:`_LENGTH_SLOT`, :data:`_TRACE_SLOT`), ``must_close``
    whether h11 found that the request ends the connection (``Connection: close`` among the fields)."""

    __slots__ = ("method", "must_close", "parts", "slots", "target")

    def __init__(self, method: str, target: str, parts: list[bytes], slots: list[int], must_close: bool) -> None:
        self.method = method
        self.target = target
        self.parts = parts
        self.slots = slots
        self.must_close = must_close

    def render(self, values: tuple[bytes, bytes], body: bytes) -> bytes:
        """The head with ``values`` (Content-Length, traceparent) in their slots, ``body`` appended."""
        parts = self.parts
        out = [parts[0]]
        for i, slot in enumerate(self.slots, 1):
            out.append(values[slot])
            out.append(parts[i])
        out.append(body)
        return b"".join(out)


#: a header set whose head cannot be templated (a field value that contains a placeholder, an invalid field):
#: every request with it is written by h11 in full, which also reports what is invalid.
_NO_TEMPLATE = object()


def _head_template(method: str, target: str, header_set: HeaderSet) -> _HeadTemplate | None:
    """Have h11 write the head of ``header_set`` with placeholders in its slots; None when it cannot be templated."""
    marked = header_set.fields.copy()
    empty = header_set.fields.copy()  # the same request with an empty body: asks h11 whether it must close after
    marks: list[tuple[bytes, int]] = []
    if header_set.length_at is not None:
        marked[header_set.length_at] = ("Content-Length", _LENGTH_MARK)
        empty[header_set.length_at] = ("Content-Length", "0")
        marks.append((_LENGTH_MARK.encode(), _LENGTH_SLOT))
    if header_set.trace_at is not None:
        marked[header_set.trace_at] = empty[header_set.trace_at] = ("traceparent", _TRACE_MARK)
        marks.append((_TRACE_MARK.encode(), _TRACE_SLOT))
    try:
        head = h11.Connection(h11.CLIENT).send(h11.Request(method=method, target=target, headers=marked))
        probe = h11.Connection(h11.CLIENT)
        probe.send(h11.Request(method=method, target=target, headers=empty))
        probe.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return None
    assert head is not None
    found: list[tuple[int, int, int]] = []  # (offset, length, slot)
    for mark, slot in marks:
        if head.count(mark) != 1:
            return None
        found.append((head.index(mark), len(mark), slot))
    found.sort()
    parts: list[bytes] = []
    pos = 0
    for offset, length, _ in found:
        parts.append(head[pos:offset])
        pos = offset + length
    parts.append(head[pos:])
    return _HeadTemplate(method, target, parts, [slot for _, _, slot in found], probe.our_state is h11.MUST_CLOSE)


def _template_for(header_set: HeaderSet, method: str, target: str) -> _HeadTemplate | None:
    """The head template of ``header_set``, built the second time the set is sent (a set sent once is written the
    ordinary way: a template costs two h11 writes)."""
    cached = header_set.http11
    if isinstance(cached, _HeadTemplate):
        return cached if cached.method == method and cached.target == target else None
    if cached is _NO_TEMPLATE:
        return None
    header_set.uses += 1
    if header_set.uses < 2:
        return None
    template = _head_template(method, target, header_set)
    header_set.http11 = _NO_TEMPLATE if template is None else template
    return template


class _BeyondResponse(Exception):
    """Raised from a parser callback to stop llhttp at bytes that follow the complete response (nothing was asked
    for them: the connection is then closed rather than reused)."""


class _UnusableStatus(Exception):
    """Raised from a parser callback on a status the client cannot go on from: ``101 Switching Protocols`` (it never
    asks for an upgrade) or one below 100 (RFC 9110 §15: status codes are 100-599; llhttp reads any three digits)."""


class _FieldsTooLarge(Exception):
    """Raised from a parser callback when the header (or trailer) fields exceed :data:`MAX_RESPONSE_HEAD_BYTES`: a
    head that arrives whole in one large read is never seen incomplete, so the per-read count alone would miss it."""


class _ResponseReader:
    """The callback object llhttp reports one response to (httptools looks the ``on_*`` names up once).

    One per connection; :meth:`start` installs a fresh parser for each request. The connection reads the fields
    after each ``feed_data`` call:

    * ``body`` — the body pieces (HTTP framing removed) of the current read, in order; the connection empties it;
    * ``head_done`` — the final response head is complete; ``head_ready`` — and not yet handed on; ``status``,
      ``headers`` (raw names and values, as sent), ``http_version`` (``"1.1"``) describe it;
    * ``complete`` — the final response ended; ``keep_alive`` says whether the connection may carry another
      request (llhttp's verdict: HTTP version, ``Connection`` header, and whether the body was delimited by the
      close);
    * ``head_bytes`` — bytes fed before the head completed, ``field_bytes`` — bytes of the header and trailer fields
      parsed (both for :data:`MAX_RESPONSE_HEAD_BYTES`);
    * ``trailers`` — the trailer fields of a chunked body (RFC 9112 §7.1.2), raw like ``headers``; llhttp reports
      them through ``on_header`` too, after the head, so ``on_header`` fills ``fields``, which is the head's list
      until the head completes and the trailers' list after.

    Interim ``1xx`` responses (RFC 9110 §15.2) are parsed and forgotten.
    """

    __slots__ = (
        "body",
        "complete",
        "field_bytes",
        "fields",
        "head_bytes",
        "head_done",
        "head_ready",
        "headers",
        "http_version",
        "informational",
        "keep_alive",
        "on_body",
        "parser",
        "status",
        "trailers",
    )

    def __init__(self) -> None:
        self.body: list[bytes] = []
        # Called by llhttp once per body piece (per HTTP chunk): a bound C method, so no bytecode runs per chunk.
        self.on_body: Callable[[bytes], None] = self.body.append
        self.parser: httptools.HttpResponseParser | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.trailers: list[tuple[bytes, bytes]] = []
        self.fields = self.headers  # where on_header appends: the head's fields, then the trailer's
        self._reset()

    def _reset(self) -> None:
        """The state of a response not yet begun."""
        self.body.clear()
        self.headers = self.fields = []
        self.trailers = []
        self.status = 0
        self.http_version = ""
        self.head_done = False
        self.head_ready = False
        self.informational = False
        self.complete = False
        self.keep_alive = False
        self.head_bytes = 0
        self.field_bytes = 0

    def start(self) -> None:
        """Expect a new response (a request was just sent): fresh parser, fresh state."""
        # A new parser per response: llhttp's state after a message that ended the connection's usefulness (an
        # error, a HEAD response whose body it would still wait for) must not leak into the next one.
        self.parser = httptools.HttpResponseParser(self)
        # Chunked framing wins over a Content-Length sent along with it, as RFC 9112 §6.3 rule 3 says and h11 did;
        # llhttp refuses the pair unless told (a guard against request smuggling, which is a proxy's concern).
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)
        self._reset()

    # --- httptools callbacks ------------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise _BeyondResponse
        self.headers = self.fields = []  # an interim response's headers are not the final one's

    def on_header(self, name: bytes, value: bytes) -> None:
        self.field_bytes += len(name) + len(value)
        if self.field_bytes > MAX_RESPONSE_HEAD_BYTES:
            raise _FieldsTooLarge
        self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None
        status = parser.get_status_code()
        if status < 200:
            if status == 101 or status < 100:
                raise _UnusableStatus(status)
            self.informational = True
            return
        self.status = status
        self.fields = self.trailers = []  # any field from now on is a trailer field
        self.http_version = parser.get_http_version()
        self.keep_alive = parser.should_keep_alive()
        self.head_done = True
        self.head_ready = True

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        parser = self.parser
        assert parser is not None
        # asked here: llhttp clears the message's flags right after this callback returns
        self.keep_alive = self.keep_alive and parser.should_keep_alive()
        self.complete = True


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
        self._reader = _ResponseReader()
        self._exchange: Exchange | None = None
        self._idle = True  # at a message boundary with no request out: may send the next one
        self._sending = False  # the request is still being written
        self._reuse_allowed = True  # False once our own request said `Connection: close`
        self._head_request = False  # the response to a HEAD has no body, whatever its head says (RFC 9110 §9.3.2)
        self._framing = "close"  # how the response body ends: "chunked", "length" or "close" (RFC 9112 §6.3)
        self._content_length: int | None = None
        self._reserved = False
        self._closed = False
        protocol.attach(self)

    # --- pool interface -----------------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self._closed and not self.protocol.closed

    @property
    def usable(self) -> bool:
        return not self._closed and self.protocol.usable and self._idle

    @property
    def available(self) -> bool:
        return not self._reserved and self.usable

    def reserve(self) -> None:
        self._reserved = True
        self.requests += 1

    async def send(self, request: Outgoing, exchange: Exchange, send_timeout_s: float) -> None:
        method, target, headers, body, header_set = request
        self._idle = False
        self._sending = True
        self._exchange = exchange
        self._head_request = method.upper() == "HEAD"
        self._reader.start()
        protocol = self.protocol
        with Sending(exchange.timeline, send_timeout_s, len(body), _invalid_request) as span:
            try:
                template = None if header_set is None else _template_for(header_set, method, target)
                coalesce = len(body) <= COALESCE_BODY_BYTES
                if template is not None:
                    assert header_set is not None
                    trace_at = header_set.trace_at
                    trace = b"" if trace_at is None else headers[trace_at][1].encode("ascii")
                    head = template.render((b"%d" % len(body), trace), body if coalesce else b"")
                    tail = b"" if coalesce else body
                    self._reuse_allowed = not template.must_close
                else:
                    # h11 only serialises (and validates) the request; its receive side is never used.
                    conn = h11.Connection(h11.CLIENT)
                    head = conn.send(h11.Request(method=method, target=target, headers=headers))
                    tail = conn.send(h11.Data(data=body)) if body else b""
                    tail += conn.send(h11.EndOfMessage())
                    # a `Connection: close` among the caller's headers: this connection ends with the response
                    self._reuse_allowed = conn.our_state is not h11.MUST_CLOSE
                    if coalesce and tail:
                        head += tail
                        tail = b""
                span.begin()
                protocol.write(head)
                span.headers_sent()
                if tail:
                    protocol.write(tail)
                if protocol.write_pending:  # skip the await (a loop iteration) when everything went out at once
                    async with asyncio.timeout(send_timeout_s):  # not wait_for: that runs drain() as a task of its own
                        await protocol.drain()
            finally:
                self._sending = False

    def abandon(self, exchange: Exchange) -> None:
        if self._exchange is exchange:
            self._exchange = None
            self._close()

    def close(self) -> None:
        self._close()

    # --- Receiver (called from WireProtocol) --------------------------------------------------------------------

    def data_received(self, data: bytes, at_ns: int, user_ns: int | None = None) -> None:
        ex = self._exchange
        if ex is None:
            # bytes while no request is out: the server broke the protocol or is closing; never reuse this one
            self._close()
            return
        reads = ex.reads
        read_index = len(reads)
        reads.append(_new_tuple(Read, (at_ns, len(data), user_ns)))
        if read_index == 0:
            ex.timeline.first_byte_ns = at_ns
        reader = self._reader
        parser = reader.parser
        if parser is None:  # closed under us: nothing is expected any more
            return
        try:
            try:
                parser.feed_data(data)
            except _ParserError as exc:
                self._parse_failed(ex, exc, at_ns, read_index)
                return
            if reader.head_ready or reader.complete or not reader.head_done:
                self._milestones(ex, data, at_ns, read_index)
                return
            # The common read in a stream: body bytes only.
            body = reader.body
            if body:
                ex.body(body[0] if len(body) == 1 else b"".join(body), at_ns, read_index)
                body.clear()
                if ex.finished:
                    self._failed_mid_body(ex)
        except Exception as exc:  # a bug must fail the request with a message, not kill the transport silently
            self._internal_error(ex, exc, at_ns)

    def eof_received(self) -> None:
        ex = self._exchange
        if ex is None:
            self._close()
            return
        at_ns = monotonic_ns()
        reader = self._reader
        try:
            if reader.head_done and self._framing == "close":
                # RFC 9112 §6.3 rule 8: the close is the end of this body (HTTP/1.0 servers, some proxies)
                self._on_end(ex, at_ns, keep_alive=False)
            elif reader.head_done:
                self._protocol_error(ex, self._truncation(), at_ns, eof=True)
            else:
                self._protocol_error(ex, "no complete response head", at_ns, eof=True)
        except Exception as exc:
            self._internal_error(ex, exc, at_ns)

    def connection_lost(self, exc: BaseException | None) -> None:
        ex = self._exchange
        if ex is not None and not ex.finished:
            ex.fail(ex.lost_error(exc), monotonic_ns())
        self._exchange = None
        self._mark_closed()

    # --- internals ----------------------------------------------------------------------------------------------

    def _milestones(self, ex: Exchange, data: bytes, at_ns: int, read_index: int) -> None:
        """The slower part of a read: the head arrived, the message ended, or the head is still incomplete."""
        reader = self._reader
        if not reader.head_done:
            reader.head_bytes += len(data)
            if reader.head_bytes > MAX_RESPONSE_HEAD_BYTES:
                self._protocol_error(
                    ex, f"the response head is larger than {MAX_RESPONSE_HEAD_BYTES} bytes", at_ns, eof=False
                )
            return
        if reader.head_ready:
            reader.head_ready = False
            self._on_response(ex, at_ns)
            if self._head_request:
                reader.body.clear()
                self._on_end(ex, at_ns, keep_alive=reader.keep_alive)
                return
        body = reader.body
        if body:
            ex.body(body[0] if len(body) == 1 else b"".join(body), at_ns, read_index)
            body.clear()
        if reader.complete:
            self._on_end(ex, at_ns, keep_alive=reader.keep_alive)
        elif ex.finished:
            self._failed_mid_body(ex)

    def _parse_failed(self, ex: Exchange, exc: httptools.HttpParserError, at_ns: int, read_index: int) -> None:
        """llhttp stopped: a malformed response, bytes after the response, or a 101. What parsed before the bad byte
        is delivered first, so the events read before a broken chunk are kept."""
        reader = self._reader
        cause = exc.__context__  # httptools chains the exception a callback raised
        if reader.head_ready:
            reader.head_ready = False
            self._on_response(ex, at_ns)
        body = reader.body
        if body and not self._head_request:
            ex.body(b"".join(body), at_ns, read_index)
        body.clear()
        if reader.complete or (self._head_request and reader.head_done):
            # The response itself was fine: what followed it (unasked-for bytes, or data after `Connection:
            # close`) only means this connection must not carry another request.
            self._on_end(ex, at_ns, keep_alive=False)
            return
        if isinstance(cause, _FieldsTooLarge):
            section = "trailer section" if reader.head_done else "head"
            message = f"the response {section} is larger than {MAX_RESPONSE_HEAD_BYTES} bytes"
        elif isinstance(cause, _UnusableStatus):
            status = cause.args[0]
            message = (
                "101 Switching Protocols without an upgrade being asked for"
                if status == 101
                else f"status code {status} is not a valid HTTP status"
            )
        else:
            reason = str(exc) or type(exc).__name__
            message = reason if cause is None else f"{reason} ({cause!r})"
        self._protocol_error(ex, message, at_ns, eof=False)

    def _on_response(self, ex: Exchange, at_ns: int) -> None:
        reader = self._reader
        version = "HTTP/" + reader.http_version
        self.info.http_version = version
        if ex.timeline.connection is not None:
            ex.timeline.connection.http_version = version
            ex.timeline.connection.tcp_info_at_headers = read_tcp_info(self.protocol.sock)
        headers = _decode_fields(reader.headers)
        content_length: int | None = None
        chunked = False
        for name, value in headers:
            if name == "content-length" and value.strip().isdigit():
                content_length = int(value)
            elif name == "transfer-encoding":
                # the final transfer coding decides the framing (RFC 9112 §6.3 rule 4)
                chunked = value.rsplit(",", 1)[-1].strip().lower() == "chunked"
        self._content_length = content_length
        self._framing = "chunked" if chunked else "length" if content_length is not None else "close"
        ex.response(reader.status, headers, at_ns)

    def _on_end(self, ex: Exchange, at_ns: int, *, keep_alive: bool) -> None:
        trailers = self._reader.trailers
        if trailers:
            ex.trailers(_decode_fields(trailers))
        if ex.timeline.connection is not None:
            ex.timeline.connection.tcp_info_at_end = read_tcp_info(self.protocol.sock)
        ex.end(at_ns)
        self._exchange = None
        if keep_alive and self._reuse_allowed and not self._sending:
            self._idle = True  # keep-alive: ready for the next request
            self._reserved = False
            if self.on_release is not None:
                self.on_release(self)
        else:
            self._close()  # Connection: close, HTTP/1.0, a body delimited by EOF, or the request still going out

    def _failed_mid_body(self, ex: Exchange) -> None:
        """The exchange failed while the body was still coming (e.g. invalid JSON): this connection is not at a
        message boundary, so it cannot carry another request."""
        if self._exchange is ex:
            self._exchange = None
            self._close()

    def _truncation(self) -> str:
        """Why the body is incomplete, for the message of a close in mid-body."""
        if self._framing == "chunked":
            return "chunked body without its terminating zero-size chunk"
        return f"{self._content_length}-byte Content-Length body cut short"

    def _protocol_error(self, ex: Exchange, reason: str, at_ns: int, *, eof: bool) -> None:
        if eof and ex.timeline.status is not None:
            err = make_error(
                f"the server closed the connection before the response body ended ({reason}); "
                f"{len(ex.events)} events, {ex.body_bytes} body bytes received",
                phase=Phase.STREAM,
                kind=ErrorKind.TRUNCATED,
            )
        elif eof:
            err = lost_error(None, Phase.HEADERS, "before sending a complete response head")
        else:
            phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
            err = make_error(f"invalid HTTP/1.1 response: {reason}", phase=phase, kind=ErrorKind.PROTOCOL)
        ex.fail(err, at_ns)
        self._exchange = None
        self._close()

    def _internal_error(self, ex: Exchange, exc: Exception, at_ns: int) -> None:
        phase = Phase.HEADERS if ex.timeline.status is None else Phase.STREAM
        ex.fail(make_error(f"internal error: {exc!r}", phase=phase, kind=ErrorKind.INTERNAL), at_ns)
        self._exchange = None
        self._close()

    def _close(self) -> None:
        if not self._closed:
            self.protocol.close()
        self._mark_closed()

    def _mark_closed(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reserved = False
        self._idle = False
        self._reader.parser = None  # the parser refers back to the reader: do not keep the pair alive
        if self.on_release is not None:
            self.on_release(self)


def _decode_fields(fields: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """Raw header or trailer fields as strings: lower-case names, as h11 gave them and as Exchange and the signal
    parsers expect; values latin-1 (RFC 9110 §5.5: bytes beyond ASCII are opaque, and latin-1 keeps every byte)."""
    return [(k.decode("ascii", "replace").lower(), v.decode("latin-1")) for k, v in fields]
