"""The measuring client: :class:`Client` sends requests and returns their timelines.

``request()`` never raises because the request failed: the failure is recorded in the returned timeline (phase,
kind, message) next to everything measured before it. Exceptions are for misuse and cancellation only, plus
:meth:`Client.get`, a small convenience that raises :class:`~latscope.wire.errors.WireError` when no response came.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence
from time import monotonic_ns
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import orjson

from latscope import __version__
from latscope.dialects import DIALECTS, openai
from latscope.dialects.base import RequestSpec, StreamDecoder
from latscope.timeline.model import Phase, Timeline
from latscope.timeline.redact import redact_headers, redact_url
from latscope.wire.connection import Connection, open_connection
from latscope.wire.errors import WireError, make_error, timeout_error
from latscope.wire.exchange import ErrorBodyDecoder, Exchange, ResponseBodyDecoder
from latscope.wire.models import Origin, OriginStats, Response, Timeouts, join_url, split_url
from latscope.wire.pool import ConnectionPool
from latscope.wire.tls import SessionCache, make_ssl_context
from latscope.wire.trace import new_traceparent

USER_AGENT = f"latscope/{__version__}"


def default_decoder(spec: RequestSpec) -> StreamDecoder | None:
    """The stream decoder for ``spec.dialect`` ("openai.chat", "openai.completions"), or None when unknown."""
    family, _, mode = (spec.dialect or "").partition(".")
    if family == "openai" and mode in openai.MODES:
        return openai.OpenAIStreamDecoder(mode)
    return None


def default_body_decoder(spec: RequestSpec) -> ResponseBodyDecoder | None:
    """The decoder of a non-streamed response body for ``spec.dialect`` (the registered dialect's
    ``decode_response``), or None when the dialect is unknown."""
    dialect = DIALECTS.get(spec.dialect) if spec.dialect else None
    return dialect.decode_response if dialect is not None else None


def asks_for_stream(spec: RequestSpec) -> bool:
    """True when the request body is a JSON object with ``"stream": true``."""
    if not spec.body or b'"stream"' not in spec.body:
        return False
    try:
        body = orjson.loads(spec.body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


class Client:
    """An instrumented HTTP client for streamed LLM requests. Use one per experiment; it owns a connection pool.

    ``http2`` offers ``h2`` by ALPN on https (plain http is always HTTP/1.1); ``quickack`` sets TCP_QUICKACK before
    every read and after every write (to tell Nagle/delayed-ACK holding from proxy buffering); ``headers`` go on
    every request (per-call headers override them by name); ``keep_text`` keeps the generated text in
    ``Timeline.output_text``; ``trace_context`` sends a fresh W3C ``traceparent`` with each request.
    """

    def __init__(
        self,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        http2: bool = True,
        quickack: bool = False,
        timeouts: Timeouts = Timeouts(),  # noqa: B008 - frozen, so one shared default is safe
        max_connections_per_origin: int = 256,
        headers: Sequence[tuple[str, str]] = (),
        keep_text: bool = False,
        trace_context: bool = True,
    ) -> None:
        if max_connections_per_origin < 1:
            raise ValueError("max_connections_per_origin must be at least 1")
        self.verify = verify
        self.ca_file = ca_file
        self.http2 = http2
        self.quickack = quickack
        self.timeouts = timeouts
        self.headers = list(headers)
        self.keep_text = keep_text
        self.trace_context = trace_context
        # built before the first https request's clock starts (see _prepare_tls), not here: loading the system trust
        # store costs 20-30 ms, which a client that only speaks plain http should not pay
        self._ssl_context: ssl.SSLContext | None = None
        self._sessions = SessionCache()
        self._pool = ConnectionPool(self._open, max_per_origin=max_connections_per_origin, may_multiplex=http2)
        #: decodes 4xx/5xx bodies; OpenAI's decoder reads the shapes of most servers (TGI, FastAPI, HTML pages too)
        self.error_decoder: ErrorBodyDecoder = openai.decode_error_body
        self._closed = False

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

        A streamed request (``decoder`` given, or ``"stream": true`` in the body) is decoded event by event with
        ``decoder`` or the dialect's default decoder. ``new_connection`` forces a fresh connection (still offering
        the saved TLS session). ``scheduled_ns`` is when a load generator meant to send it; ``timeline`` lets the
        caller pass the record to fill (it is returned).
        """
        t = timeline if timeline is not None else Timeline()
        self._prepare_tls(base_url)
        t.started_ns = monotonic_ns()
        if scheduled_ns is not None:
            t.scheduled_ns = scheduled_ns
        t.method = spec.method
        t.dialect = spec.dialect or None
        t.model = spec.model
        t.label = label
        url = join_url(base_url, spec.path)
        t.url = redact_url(url)
        t.request_body_bytes = len(spec.body)
        try:
            origin, target = split_url(url)
        except WireError as err:
            t.error = err.to_record()
            t.ended_ns = t.error.at_ns
            return t
        streamed = decoder is not None or asks_for_stream(spec)
        if streamed and decoder is None:
            decoder = default_decoder(spec)
        body_decoder = None if streamed else default_body_decoder(spec)
        request_headers = self._headers(origin, spec.headers, headers, spec.method, spec.body, t)
        exchange = Exchange(
            t,
            decoder=decoder,
            streamed=streamed,
            keep_text=self.keep_text,
            error_decoder=self.error_decoder,
            body_decoder=body_decoder,
        )
        await self._exchange(origin, target, spec.method, request_headers, spec.body, exchange, new_connection)
        return t

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
        request_headers = self._headers(origin, [("accept", "*/*")], headers, "GET", b"", t)
        exchange = Exchange(t, decoder=None, streamed=False, keep_body=True, error_decoder=self.error_decoder)
        await self._exchange(origin, target, "GET", request_headers, b"", exchange, False)
        if t.status is None or (t.error is not None and t.error.kind != "http-status"):
            raise WireError.from_timeline(t)
        return Response(t.status, exchange.response_header_list, exchange.body_bytes_kept, t)

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
                raise make_error(f"TLS set-up failed{where}: {reason}", phase=Phase.TLS, kind="tls-config") from None
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
        )

    def _headers(
        self,
        origin: Origin,
        spec_headers: Sequence[tuple[str, str]],
        call_headers: Sequence[tuple[str, str]],
        method: str,
        body: bytes,
        t: Timeline,
    ) -> list[tuple[str, str]]:
        """Request headers: Host and User-Agent, then the spec's, the client's and the call's (later names replace
        earlier ones), Content-Length, and a fresh ``traceparent``. The timeline keeps them redacted."""
        merged: dict[str, tuple[str, str]] = {
            "host": ("Host", origin.authority),
            "user-agent": ("User-Agent", USER_AGENT),
        }
        for source in (spec_headers, self.headers, call_headers):
            for name, value in source:
                merged[name.lower()] = (name, value)
        if body or method in ("POST", "PUT", "PATCH"):
            merged["content-length"] = ("Content-Length", str(len(body)))
        merged.pop("transfer-encoding", None)  # the body is sent whole, with a length
        given = merged.get("traceparent")
        if given is not None:
            parts = given[1].split("-")
            t.trace_id = parts[1] if len(parts) == 4 else None
        elif self.trace_context:
            value, t.trace_id = new_traceparent()
            merged["traceparent"] = ("traceparent", value)
        out = list(merged.values())
        t.request_headers = redact_headers(out)
        return out

    async def _exchange(
        self,
        origin: Origin,
        target: str,
        method: str,
        headers: list[tuple[str, str]],
        body: bytes,
        exchange: Exchange,
        new_connection: bool,
    ) -> None:
        t = exchange.timeline
        timeouts = self.timeouts
        deadline_ns = None if timeouts.total_s is None else t.started_ns + int(timeouts.total_s * 1e9)
        conn: Connection | None = None
        try:
            if self._closed:
                raise make_error("the client is closed", phase=Phase.POOL, kind="closed")
            conn = await self._with_deadline(
                self._pool.acquire(origin, t, new_connection=new_connection, deadline_ns=deadline_ns),
                deadline_ns,
                Phase.POOL,
            )
            t.connection_ready_ns = monotonic_ns()
            await self._with_deadline(
                conn.send(method, target, headers, body, exchange, timeouts.send_s), deadline_ns, Phase.SEND
            )
            await self._await_headers(exchange, deadline_ns)
            await self._await_body(exchange, deadline_ns)
        except WireError as err:
            exchange.fail(err, monotonic_ns())
            if conn is not None:
                conn.abandon(exchange)
        except Exception as exc:  # a bug must not break request()'s promise to return the timeline
            exchange.fail(make_error(f"internal error: {exc!r}", phase=self._phase(t), kind="internal"), monotonic_ns())
            if conn is not None:
                conn.abandon(exchange)
        except asyncio.CancelledError:
            exchange.fail(
                make_error("the request was cancelled", phase=self._phase(t), kind="cancelled"), monotonic_ns()
            )
            if conn is not None:
                conn.abandon(exchange)
            raise
        finally:
            if conn is not None and origin.tls:
                ssl_object = conn.protocol.ssl_object
                if ssl_object is not None and t.first_byte_ns is not None:
                    # after application data was read, so a TLS 1.3 ticket (sent after the handshake) is in it
                    self._sessions.save(origin, ssl_object.session)

    async def _with_deadline(self, awaitable: Any, deadline_ns: int | None, phase: Phase) -> Any:
        if deadline_ns is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, max(0.0, (deadline_ns - monotonic_ns()) / 1e9))
        except TimeoutError:
            raise self._total_timeout(phase) from None

    def _total_timeout(self, phase: Phase) -> WireError:
        return timeout_error(phase, f"total timeout of {self.timeouts.total_s:g} s exceeded during {phase}")

    async def _await_headers(self, exchange: Exchange, deadline_ns: int | None) -> None:
        future = exchange.headers_future
        if future.done():
            return
        limit = self.timeouts.headers_s
        total_left = None if deadline_ns is None else (deadline_ns - monotonic_ns()) / 1e9
        timeout = limit if total_left is None else max(0.0, min(limit, total_left))
        await asyncio.wait([future], timeout=timeout)
        if not future.done():
            if total_left is not None and total_left <= limit:
                raise self._total_timeout(Phase.HEADERS)
            raise timeout_error(Phase.HEADERS, f"no response head within {limit:g} s of sending the request")

    async def _await_body(self, exchange: Exchange, deadline_ns: int | None) -> None:
        """Wait for the end of the body. The read timeout is a limit on the gap between reads, checked against the
        last read's stamp when a wait runs out, so nothing is re-armed per read on the hot path."""
        done = exchange.done
        read_ns = int(self.timeouts.read_s * 1e9)
        t = exchange.timeline
        while not done.done():
            now = monotonic_ns()
            last = t.reads[-1].at_ns if t.reads else (t.headers_received_ns or now)
            gap_left_ns = read_ns - (now - last)
            if deadline_ns is not None and deadline_ns - now <= 0:
                raise self._total_timeout(Phase.STREAM)
            if gap_left_ns <= 0:
                raise timeout_error(
                    Phase.STREAM,
                    f"no data for {self.timeouts.read_s:g} s while reading the stream "
                    f"(after {len(t.events)} events, {exchange.body_bytes} body bytes)",
                )
            wait_ns = gap_left_ns if deadline_ns is None else min(gap_left_ns, deadline_ns - now)
            await asyncio.wait([done], timeout=wait_ns / 1e9)

    @staticmethod
    def _phase(t: Timeline) -> Phase:
        """The phase a request is in, from its marks (for errors raised outside a phase's own code)."""
        if t.status is not None:
            return Phase.STREAM
        if t.send_end_ns is not None:
            return Phase.HEADERS
        if t.connection_ready_ns is not None:
            return Phase.SEND
        if t.tls_start_ns is not None:
            return Phase.TLS
        if t.connect_start_ns is not None:
            return Phase.CONNECT
        if t.dns_start_ns is not None:
            return Phase.DNS
        return Phase.POOL
