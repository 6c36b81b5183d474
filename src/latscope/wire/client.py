"""The measuring client: :class:`Client` sends requests and returns their timelines.

``request()`` never raises because the request failed: the failure is recorded in the returned timeline (phase,
kind, message) next to everything measured before it. Exceptions are for misuse and cancellation only, plus
:meth:`Client.get`, a small convenience that raises :class:`~latscope.wire.errors.WireError` when no response came.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Sequence
from time import monotonic_ns
from types import TracebackType
from urllib.parse import urlsplit

import orjson

from latscope import __version__
from latscope.dialects import DIALECTS
from latscope.dialects.base import Dialect, ErrorBodyDecoder, Framing, RequestSpec, StreamDecoder
from latscope.dialects.errors import decode_error_body
from latscope.timeline.model import ErrorKind, Phase, RequestError, Timeline
from latscope.timeline.redact import redact_url
from latscope.wire.connection import Connection, open_connection
from latscope.wire.encoding import STREAM_ACCEPT_ENCODING
from latscope.wire.errors import ModelListError, WireError, make_error, timeout_error
from latscope.wire.exchange import Exchange
from latscope.wire.kstamps import DEFAULT_STAMPS, STAMP_CHOICES, arm
from latscope.wire.models import Limits, Origin, OriginStats, Response, Timeouts, join_url, split_url
from latscope.wire.phase import after, budget, nearest_limit, total_deadline, total_timeout
from latscope.wire.pool import DEFAULT_MAX_CONNECTIONS_PER_ORIGIN, ConnectionPool
from latscope.wire.request import BODY_METHODS, HeaderSet, Outgoing, merge_headers
from latscope.wire.tcpinfo import send_backlog
from latscope.wire.tls import SessionCache, make_ssl_context

USER_AGENT = f"latscope/{__version__}"

#: URLs and header sets a client remembers (see Client._target and Client._header_set); when full, it forgets them
#: all and starts again (O(1) per request on average). A load test uses a handful; a caller that varies its headers
#: per request refills it, at the cost of merging each set once, as it would without the cache.
_CACHE_ENTRIES = 256

#: what a client remembers about one ``(base_url, path)``: the full URL redacted, and its origin and target
_Target = tuple[str, Origin, str]


#: what a streamed response of a request whose dialect is unknown must be: an event stream (most servers send one)
SSE_TYPES: tuple[str, ...] = ("text/event-stream",)

#: the spec headers of :meth:`Client.get`
_ACCEPT_ANY = (("accept", "*/*"),)


#: Failures that mean the connection went away under the request: the peer's close (FIN or RST) raced it.
CLOSED_KINDS = frozenset({ErrorKind.CLOSED, ErrorKind.RESET, ErrorKind.LOST, ErrorKind.TRUNCATED})


def closed_under_reuse(t: Timeline) -> RequestError | None:
    """``t``'s error when a kept-alive connection went away under it (an error of :data:`CLOSED_KINDS` on a reused
    connection), else None."""
    error, info = t.error, t.connection
    if error is None or info is None or not info.reused or error.kind not in CLOSED_KINDS:
        return None
    return error


def closed_before_reply(t: Timeline) -> bool:
    """True when ``t`` went to a kept-alive connection that turned out closed before any byte of a response came:
    the case an HTTP client may send again on a new connection."""
    error = closed_under_reuse(t)
    return error is not None and error.phase in (Phase.SEND, Phase.HEADERS) and t.first_byte_ns is None


def asks_for_stream(spec: RequestSpec) -> bool:
    """True when the request will be answered with a stream: as its builder said (``spec.stream``), else when the
    body is a JSON object with ``"stream": true``."""
    if spec.stream is not None:
        return spec.stream
    if not spec.body or b'"stream"' not in spec.body:
        return False
    try:
        body = orjson.loads(spec.body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def give_up(exchange: Exchange, conn: Connection | None, error: WireError) -> None:
    """End a request that failed with ``error`` (now), and let its connection, if it got one, drop the exchange."""
    exchange.fail(error, monotonic_ns())
    if conn is not None:
        conn.abandon(exchange)


class Client:
    """An instrumented HTTP client for streamed LLM requests. Use one per experiment; it owns a connection pool.

    ``http2`` offers ``h2`` by ALPN on https (plain http is always HTTP/1.1); ``quickack`` sets TCP_QUICKACK before
    every read and after every write (to tell Nagle/delayed-ACK holding from proxy buffering); ``delayed_ack`` does
    the opposite: new connections start in the kernel's delayed-ACK mode (TCP_QUICKACK 0 after connect and after
    every read), the mode a reused keep-alive connection is in, so a server's Nagle holding shows on fresh
    connections too (Linux only; ``ConnectionInfo.delayed_ack`` says whether it was applied); ``headers`` go on
    every request (per-call headers override them by name); ``keep_text`` keeps the generated text in
    ``Timeline.output_text``; ``trace_context`` sends a fresh W3C ``traceparent`` with each request; ``limits``
    bound what one response may make the client hold (:class:`~latscope.wire.models.Limits`); ``stamps`` says what
    stamps each read: ``"kernel"`` reads the sockets itself with the kernel's receive stamps (Linux ``SO_TIMESTAMPNS``;
    each read keeps its user-space stamp too, see :class:`~latscope.timeline.model.Read`), falling back to user-space
    stamps where the platform gives none (``ConnectionInfo.stamps`` says which); ``"user"`` stamps each read when
    the event loop hands it over. Streamed requests ask
    for ``Accept-Encoding: identity`` (a compressed stream holds tokens back); one that comes compressed anyway is
    decoded and the timeline warns.
    """

    def __init__(
        self,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        http2: bool = True,
        quickack: bool = False,
        delayed_ack: bool = False,
        timeouts: Timeouts = Timeouts(),  # noqa: B008 - frozen, so one shared default is safe
        limits: Limits = Limits(),  # noqa: B008 - frozen too
        max_connections_per_origin: int = DEFAULT_MAX_CONNECTIONS_PER_ORIGIN,
        headers: Sequence[tuple[str, str]] = (),
        keep_text: bool = False,
        trace_context: bool = True,
        stamps: str = DEFAULT_STAMPS,
    ) -> None:
        if stamps not in STAMP_CHOICES:
            raise ValueError(f"stamps must be one of {', '.join(STAMP_CHOICES)}, not {stamps!r}")
        if max_connections_per_origin < 1:
            raise ValueError("max_connections_per_origin must be at least 1")
        if quickack and delayed_ack:
            raise ValueError("quickack and delayed_ack are opposite ACK modes: set one of them")
        self.verify = verify
        self.ca_file = ca_file
        self.http2 = http2
        self.quickack = quickack
        self.delayed_ack = delayed_ack
        self.timeouts = timeouts
        self.limits = limits
        self.headers = list(headers)
        self.keep_text = keep_text
        self.trace_context = trace_context
        self.stamps = stamps
        if stamps == "kernel":
            arm()  # before any request's clock starts: it may wait for the kernel to start stamping
        # built before the first https request's clock starts (see _prepare_tls), not here: loading the system trust
        # store costs 20-30 ms, which a client that only speaks plain http should not pay
        self._ssl_context: ssl.SSLContext | None = None
        self._sessions = SessionCache()
        self._pool = ConnectionPool(self._open, max_per_origin=max_connections_per_origin, may_multiplex=http2)
        #: decodes 4xx/5xx bodies of requests whose dialect is unknown (and of :meth:`get`); the shared decoder reads
        #: the shapes of most servers (OpenAI, TGI, FastAPI, HTML pages too)
        self.error_decoder: ErrorBodyDecoder = decode_error_body
        self._closed = False
        self._targets: dict[tuple[str, str], _Target] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._header_sets: dict[tuple[object, ...], HeaderSet] = {}

    # --- public API ---------------------------------------------------------------------------------------------

    async def request(
        self,
        spec: RequestSpec,
        base_url: str,
        *,
        decoder: StreamDecoder | None = None,
        headers: Sequence[tuple[str, str]] = (),
        new_connection: bool = False,
        label: str | None = None,
        scheduled_ns: int | None = None,
        timeline: Timeline | None = None,
    ) -> Timeline:
        """Send ``spec`` to ``base_url`` + ``spec.path`` and record its timeline (returned, also when it failed).

        The dialect registered under ``spec.dialect`` (:data:`latscope.dialects.DIALECTS`) says how the response
        reads: a streamed request (``decoder`` given, or the spec asks for a stream) is decoded event by event with
        ``decoder`` or a new one of the dialect's, and must come back as the dialect's stream media type; a
        non-streamed one is decoded whole; error bodies with the dialect's error decoder. ``new_connection`` forces a
        fresh connection (still offering the saved TLS session). ``scheduled_ns`` is when a load generator meant to
        send it; ``timeline`` lets the caller pass the record to fill (it is returned).

        A request that went to a kept-alive connection the server had already closed, and failed before any byte of
        a response arrived, is sent once more on a new connection (RFC 9112 §9.3.1: nothing of it was processed);
        the timeline records that attempt, with the first one's error in ``stale_retry_error``.
        """
        t = timeline if timeline is not None else Timeline()
        await self._attempt(t, spec, base_url, decoder, headers, new_connection, label, scheduled_ns)
        if closed_before_reply(t):
            first = t.error
            t.__init__()  # type: ignore[misc]  # the same record, emptied: the caller may hold it
            await self._attempt(t, spec, base_url, decoder, headers, True, label, scheduled_ns)
            t.stale_retry_error = first
        return t

    async def _attempt(
        self,
        t: Timeline,
        spec: RequestSpec,
        base_url: str,
        decoder: StreamDecoder | None,
        headers: Sequence[tuple[str, str]],
        new_connection: bool,
        label: str | None,
        scheduled_ns: int | None,
    ) -> None:
        """One attempt of :meth:`request`, recorded into ``t``."""
        target = self._targets.get((base_url, spec.path))
        if target is None:
            self._prepare_tls(base_url)
        t.started_ns = monotonic_ns()
        if scheduled_ns is not None:
            t.scheduled_ns = scheduled_ns
        t.method = spec.method
        t.dialect = spec.dialect or None
        t.model = spec.model
        t.max_tokens = spec.max_tokens
        t.label = label
        t.request_body_bytes = len(spec.body)
        if target is None:
            url = join_url(base_url, spec.path)
            t.url = redact_url(url)
            try:
                target = self._target(base_url, spec.path, url, t.url)
            except WireError as err:
                t.error = err.to_record()
                t.ended_ns = t.error.at_ns
                return
        else:
            t.url = target[0]
        origin, path = target[1], target[2]
        dialect = DIALECTS.get(spec.dialect) if spec.dialect else None
        streamed = decoder is not None or asks_for_stream(spec)
        t.stream = streamed
        try:
            header_set = self._header_set(
                origin, path, spec.method, spec.headers, headers, len(spec.body), streamed=streamed
            )
        except WireError as err:
            t.error = err.to_record()
            t.ended_ns = t.error.at_ns
            return
        request_headers = header_set.fill(len(spec.body), t)
        if dialect is None:
            error_decoder, body_decoder, stream_types, framing = self.error_decoder, None, SSE_TYPES, Framing.SSE
        else:
            if streamed and decoder is None:
                decoder = dialect.new_decoder(limits=self.limits.stream)
            error_decoder, stream_types, framing = dialect.decode_error, dialect.stream_media_types, dialect.framing
            body_decoder = None if streamed else dialect.decode_response
        exchange = Exchange(
            t,
            decoder=decoder,
            streamed=streamed,
            keep_text=self.keep_text,
            error_decoder=error_decoder,
            body_decoder=body_decoder,
            stream_types=stream_types,
            framing=framing,
            max_body_bytes=self.limits.max_body_bytes,
            loop=self._running_loop(),
        )
        await self._exchange(
            origin, Outgoing(spec.method, path, request_headers, spec.body, header_set), exchange, new_connection
        )

    async def get(self, url: str, *, headers: Sequence[tuple[str, str]] = ()) -> Response:
        """GET ``url`` with the whole body kept (``/v1/models``, ``/metrics``). Raises
        :class:`~latscope.wire.errors.WireError` when no complete response came; returns 4xx/5xx responses (their
        timeline carries the http-status error; :meth:`Response.raise_for_status` raises it)."""
        t = Timeline(method="GET", url=redact_url(url))
        self._prepare_tls(url)
        t.started_ns = monotonic_ns()
        try:
            origin, target = split_url(url)
        except WireError as err:
            err.timeline = t
            raise
        try:
            header_set = self._header_set(origin, target, "GET", _ACCEPT_ANY, headers, 0)
        except WireError as err:
            err.timeline = t
            raise
        request_headers = header_set.fill(0, t)
        exchange = Exchange(t, decoder=None, streamed=False, keep_body=True, error_decoder=self.error_decoder)
        await self._exchange(origin, Outgoing("GET", target, request_headers, b"", header_set), exchange, False)
        if t.status is None or (t.error is not None and t.error.kind is not ErrorKind.HTTP_STATUS):
            raise WireError.from_timeline(t)
        return Response(t.status, exchange.response_header_list, exchange.body_bytes_kept, t)

    async def fetch(self, url: str) -> tuple[int, bytes]:
        """:meth:`get` as ``(status, body)``: what a metrics scraper (:data:`latscope.signals.Fetch`) calls; its
        :class:`~latscope.wire.errors.WireError`, naming the failed phase, becomes the scrape's reason."""
        response = await self.get(url)
        return response.status, response.body

    async def list_models(self, base_url: str, dialect: Dialect) -> tuple[list[str], Timeline]:
        """The model ids the server lists at ``base_url`` + the dialect's ``models_path`` (OpenAI's ``/models``,
        Ollama's ``/api/tags``), in order, and that request's timeline. Raises
        :class:`~latscope.wire.errors.WireError` when no response came (its phase says where) and
        :class:`~latscope.wire.errors.ModelListError` for an error status or an answer that is no model list."""
        url = join_url(base_url, dialect.models_path)
        response = await self.get(url)
        if response.status >= 400:
            error = response.timeline.error
            detail = error.message if error is not None else f"HTTP {response.status}"
            raise ModelListError(f"listing models at {url} failed ({detail})", response.timeline)
        try:
            models = dialect.parse_models(response.body)
        except ValueError as exc:
            raise ModelListError(f"{url} did not answer a model list ({exc})", response.timeline) from None
        if not models:
            raise ModelListError(f"{url} lists no model", response.timeline)
        return models, response.timeline

    def send_backlog(self, t: Timeline) -> int | None:
        """What the connection that carries ``t`` has written and the server has not acknowledged (TCP segments in
        flight plus bytes still waiting in the kernel or in the client's own buffer): 0 once every byte of the
        request is in the server's kernel, which is how an experiment knows its request has arrived. None when that
        cannot be known: the request has no connection (yet), it closed, or the platform has no ``TCP_INFO``."""
        info = t.connection
        conn = None if info is None else self._pool.find(info.connection_id)
        if conn is None:
            return None
        backlog = send_backlog(conn.protocol.sock)
        if backlog is None:
            return None
        return backlog + conn.protocol.write_buffer_size

    def stats(self) -> dict[str, OriginStats]:
        """Pool statistics per origin (``"https://host:port"``): connections opened, requests, reuses, TLS."""
        return {str(origin): stats for origin, stats in self._pool.stats.items()}

    def forget_tls_sessions(self) -> None:
        """Drop every saved TLS session: the next new connection to each origin does a full handshake."""
        self._sessions.clear()

    async def aclose(self) -> None:
        """Close every pooled connection."""
        self._closed = True
        await self._pool.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- internals ----------------------------------------------------------------------------------------------

    def _prepare_tls(self, url: str) -> None:
        """Build the TLS context before an https request's clock starts: loading the trust store takes 20-30 ms,
        which would otherwise be counted as the first request's pool wait. A context that cannot be built (an
        unreadable ``ca_file``) is left to :meth:`_ssl_context_for`, which records the failure in the timeline."""
        if self._ssl_context is None and urlsplit(url).scheme.lower() == "https":
            with contextlib.suppress(OSError, ssl.SSLError):
                self._ssl_context = make_ssl_context(verify=self.verify, ca_file=self.ca_file, http2=self.http2)

    def _ssl_context_for(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            try:
                self._ssl_context = make_ssl_context(verify=self.verify, ca_file=self.ca_file, http2=self.http2)
            except (OSError, ssl.SSLError) as exc:
                where = f" (CA file {self.ca_file})" if self.ca_file else ""
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise make_error(
                    f"TLS set-up failed{where}: {reason}", phase=Phase.TLS, kind=ErrorKind.TLS_CONFIG
                ) from None
        return self._ssl_context

    async def _open(self, origin: Origin, t: Timeline, deadline_ns: int | None) -> Connection:
        ctx = self._ssl_context_for() if origin.tls else None
        return await open_connection(
            origin,
            t,
            ssl_context=ctx,
            sessions=self._sessions,
            timeouts=self.timeouts,
            deadline_ns=deadline_ns,
            quickack=self.quickack,
            delayed_ack=self.delayed_ack,
            stamps=self.stamps,
        )

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop, remembered: ``asyncio.get_running_loop()`` makes a getpid() system call each time
        on Python 3.11. The remembered loop is right while it runs, since a thread runs one loop at a time and a
        client's connections belong to one loop anyway."""
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _target(self, base_url: str, path: str, url: str, redacted_url: str) -> _Target:
        """Origin and target of ``base_url`` + ``path``, remembered: splitting and redacting the URL again for every
        request of a load test cost more than the rest of its set-up."""
        origin, target = split_url(url)
        if len(self._targets) >= _CACHE_ENTRIES:
            self._targets.clear()
        entry = self._targets[(base_url, path)] = (redacted_url, origin, target)
        return entry

    def _header_set(
        self,
        origin: Origin,
        target: str,
        method: str,
        spec_headers: Sequence[tuple[str, str]],
        call_headers: Sequence[tuple[str, str]],
        body_bytes: int,
        *,
        streamed: bool = False,
    ) -> HeaderSet:
        """The request's header set: Host and User-Agent, ``Accept-Encoding: identity`` for a stream, then the
        spec's, the client's and the call's headers (later names replace earlier ones), Content-Length, and a slot for
        a fresh ``traceparent``. Merged once per combination and remembered (see :mod:`latscope.wire.request`)."""
        with_length = body_bytes > 0 or method in BODY_METHODS
        try:
            key: tuple[object, ...] = (
                origin,
                target,
                method,
                tuple(spec_headers),
                tuple(self.headers),  # a public list a caller may change between requests
                tuple(call_headers),
                with_length,
                self.trace_context,
                streamed,
            )
            found = self._header_sets.get(key)
        except TypeError:  # an unhashable header (a list pair): merged for this request only
            key, found = (), None
        if found is not None:
            return found
        header_set = merge_headers(
            ("Host", origin.authority),
            USER_AGENT,
            ((STREAM_ACCEPT_ENCODING,) if streamed else (), spec_headers, self.headers, call_headers),
            with_length=with_length,
            trace_context=self.trace_context,
        )
        if key:
            if len(self._header_sets) >= _CACHE_ENTRIES:
                self._header_sets.clear()
            self._header_sets[key] = header_set
        return header_set

    async def _exchange(self, origin: Origin, request: Outgoing, exchange: Exchange, new_connection: bool) -> None:
        """The request's whole exchange on any protocol: a connection (:meth:`_connection_for`), the send, the
        response; a failure anywhere ends ``exchange`` with the error that names its phase."""
        t = exchange.timeline
        deadline_ns = total_deadline(t.started_ns, self.timeouts.total_s)
        conn: Connection | None = None
        try:
            if self._closed:
                raise make_error("the client is closed", phase=Phase.POOL, kind=ErrorKind.CLOSED)
            # every phase checks the total deadline where it waits: no task or timer wraps the request as a whole
            conn = await self._connection_for(origin, t, new_connection, deadline_ns)
            t.connection_ready_ns = monotonic_ns()
            await self._send(conn, request, exchange, deadline_ns)
            await self._await_response(conn, exchange, deadline_ns)
        except WireError as err:
            give_up(exchange, conn, err)
        except Exception as exc:  # a bug must not break request()'s promise to return the timeline
            give_up(
                exchange, conn, make_error(f"internal error: {exc!r}", phase=t.phase_reached(), kind=ErrorKind.INTERNAL)
            )
        except asyncio.CancelledError:
            give_up(
                exchange,
                conn,
                make_error("the request was cancelled", phase=t.phase_reached(), kind=ErrorKind.CANCELLED),
            )
            raise
        finally:
            if conn is not None and origin.tls:
                self._keep_session(origin, conn, t)

    def _connection_for(
        self, origin: Origin, t: Timeline, new_connection: bool, deadline_ns: int | None
    ) -> Awaitable[Connection]:
        """A connection for one request to ``origin`` from the pool (``t.connection`` filled in), opened within
        ``deadline_ns`` when there is none to reuse. The pool's own awaitable: no coroutine of its own per request."""
        return self._pool.acquire(origin, t, new_connection=new_connection, deadline_ns=deadline_ns)

    def _keep_session(self, origin: Origin, conn: Connection, t: Timeline) -> None:
        """Save the TLS session of an https request's connection for the next new connection to ``origin``."""
        ssl_object = conn.protocol.ssl_object
        if ssl_object is not None and t.first_byte_ns is not None:
            # after application data was read, so a TLS 1.3 ticket (sent after the handshake) is in it
            self._sessions.save(origin, ssl_object.session)

    async def _send(self, conn: Connection, request: Outgoing, exchange: Exchange, deadline_ns: int | None) -> None:
        """Write the request within the send timeout, or within what is left of the total one when that is less."""
        if deadline_ns is None:
            await conn.send(request, exchange, self.timeouts.send_s)
            return
        limit_s, total = budget(deadline_ns, self.timeouts.send_s)
        if not total:
            await conn.send(request, exchange, limit_s)
            return
        if limit_s <= 0:
            raise total_timeout(self.timeouts.total_s, Phase.SEND)
        try:
            await conn.send(request, exchange, limit_s)
        except WireError as err:
            if err.kind is ErrorKind.TIMEOUT:
                raise total_timeout(self.timeouts.total_s, Phase.SEND) from None
            raise

    async def _await_response(self, conn: Connection, exchange: Exchange, deadline_ns: int | None) -> None:
        """Wait for the response to end (or fail). The headers, read-gap and total limits are watched by one timer
        (:class:`_Watchdog`) that fails the exchange when one runs out; the wait itself is a plain await of the
        exchange's ``done`` future: one wake-up per request, nothing re-armed per read."""
        done = exchange.done
        if done.done():
            return
        watchdog = _Watchdog(self, conn, exchange, deadline_ns)
        try:
            await done
        finally:
            watchdog.cancel()


class _Watchdog:
    """The response timeouts of one request on one timer: ``headers_s`` from the end of the send to the response
    head, ``read_s`` between two reads, and the total deadline.

    The timer is set for the nearest limit. When it fires before that limit has passed (a read came in since), it
    is set again for the new nearest one, so nothing is done per read. A limit that has passed fails the exchange
    and abandons the connection; the request's task, awaiting the exchange's end, then wakes once, as it does when
    the response ends.
    """

    __slots__ = ("_client", "_conn", "_deadline_ns", "_exchange", "_handle", "_loop")

    def __init__(self, client: Client, conn: Connection, exchange: Exchange, deadline_ns: int | None) -> None:
        self._client = client
        self._conn = conn
        self._exchange = exchange
        self._deadline_ns = deadline_ns
        # the exchange's loop: asyncio.get_running_loop() costs a getpid() system call per call on Python 3.11
        self._loop = exchange.done.get_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._check()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        ex = self._exchange
        if ex.finished:
            return
        now = monotonic_ns()
        t = ex.timeline
        timeouts = self._client.timeouts
        head = t.headers_received_ns is None
        wake_ns = None
        if head:
            own_ns = after(t.send_end_ns or now, timeouts.headers_s)
            # the read gap starts counting once the head is in, at the earliest now: look again by then
            wake_ns = after(now, timeouts.read_s)
        else:
            own_ns = after(t.reads[-1].at_ns if t.reads else (t.headers_received_ns or now), timeouts.read_s)
        limit_ns, total = nearest_limit(self._deadline_ns, own_ns)
        if now < limit_ns:
            if wake_ns is not None and wake_ns < limit_ns:
                limit_ns = wake_ns
            self._handle = self._loop.call_later((limit_ns - now) / 1e9, self._check)
            return
        if total:
            err = total_timeout(timeouts.total_s, Phase.HEADERS if head else Phase.STREAM)
        elif head:
            err = timeout_error(
                Phase.HEADERS, f"no response head within {timeouts.headers_s:g} s of sending the request"
            )
        else:
            err = timeout_error(
                Phase.STREAM,
                f"no data for {timeouts.read_s:g} s while reading the stream "
                f"(after {len(t.events)} events, {ex.body_bytes} body bytes)",
            )
        ex.fail(err, now)
        self._conn.abandon(ex)
