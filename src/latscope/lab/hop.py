"""A protocol-converting gateway in front of the lab: :class:`GatewayHop` and :class:`HopLab` (``gateway-overhead``).

The source article's gateway turns HTTP/JSON into gRPC and back: every request is converted once on its way in, and
every message of a streamed answer is converted on its way out. The lab reproduces it with a real hop, not a delay
inside one server: :class:`HopLab` runs an upstream :class:`~latscope.lab.app.Lab` (every fault of the settings but
this one) and, in front of it, a second listener whose only handler is :class:`GatewayHop`. The hop forwards each
request over HTTP/1.1 (kept-alive connections) to the upstream, after spending the per-request conversion cost, and
hands the answer back chunk by chunk, spending the per-chunk cost before each. The upstream also serves directly, on
a port of its own, so ``latscope diagnose GATEWAY_URL --direct UPSTREAM_URL`` compares the same engine with and
without the hop; with both costs at 0 the hop is a thin proxy (what it costs then is the proxying itself).

Conversion is serial per stream, as in a gateway that converts a stream's messages in order: while it spends a
chunk's cost, the next chunk waits. When the chunk cost is below the upstream's gap between chunks (the default:
1 ms against decode steps of several), every chunk arrives later by the same amount and the cadence is unchanged;
above it, the stream falls behind and every gap grows.

The hop records what it spent on each request (:class:`HopRecord`, :attr:`HopLab.hop_records`): ground truth for a
diagnosis's estimate. It adds no header of its own, as a gateway that says nothing about itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11

from latscope.lab.app import Lab
from latscope.lab.certs import CertFiles, generate_self_signed, remove_cert_files
from latscope.lab.faults import GATEWAY_OVERHEAD
from latscope.lab.http.exchange import Request, ResponseChannel
from latscope.lab.http.server import HttpServer
from latscope.lab.records import RequestRecord
from latscope.lab.scheduler import Scheduler
from latscope.lab.serving import AsyncService, Served, origin_of, server_options
from latscope.lab.settings import LabSettings

#: Headers that belong to one connection (RFC 9110 §7.6.1), not forwarded by the hop; ``host`` and the framing
#: headers are set anew for the upstream connection and for the client's.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
#: Idle upstream connections the hop keeps open (more than a diagnosis has streams in flight at once).
POOL_SIZE = 32
#: Bytes read from the upstream at a time.
READ_BYTES = 65536
#: Per-request records kept (oldest dropped first), as the lab's own records.
HOP_RECORDS_MAX = 10_000
#: The chunks whose conversion a record keeps one by one (the first token's chunk is among them: an OpenAI chat
#: stream opens with a chunk that carries only the role).
LEADING_CHUNKS = 4


@dataclass(frozen=True, slots=True)
class HopRecord:
    """What the hop spent on one request (ground truth).

    Fields:
        path: the request's path.
        status: the upstream's status (None when the upstream did not answer).
        request_ms: the per-request conversion as spent (a timed sleep: the configured cost plus the event loop's
            lateness).
        leading_chunks_ms: the first :data:`LEADING_CHUNKS` streamed chunks' conversions as spent, in order.
        chunks: streamed body chunks converted (0 for a response with a known length, converted as one piece).
        chunk_ms: all chunk conversions as spent, together.
    """

    path: str
    status: int | None
    request_ms: float
    leading_chunks_ms: tuple[float, ...]
    chunks: int
    chunk_ms: float


async def _spend(ms: float) -> float:
    """Spend ``ms`` (a sleep: the conversion's time, without occupying the event loop) and return what it took."""
    if ms <= 0.0:
        return 0.0
    started = time.perf_counter_ns()
    await asyncio.sleep(ms / 1000.0)
    return (time.perf_counter_ns() - started) / 1e6


class _Upstream:
    """One HTTP/1.1 connection to the upstream, driven by h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.CLIENT)

    async def next_event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.reader.read(READ_BYTES))

    def reusable(self) -> bool:
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.writer.close()


class GatewayHop:
    """The hop's request handler: forwards to the upstream at ``host``:``port`` (``ssl_context``: over TLS), spending
    ``request_ms`` before each request and ``chunk_ms`` before each streamed chunk; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        request_ms: float,
        chunk_ms: float,
        ssl_context: ssl.SSLContext | None = None,
        records_max: int = HOP_RECORDS_MAX,
    ) -> None:
        self.host = host
        self.port = port
        self.request_ms = request_ms
        self.chunk_ms = chunk_ms
        self.ssl_context = ssl_context
        self.records: collections.deque[HopRecord] = collections.deque(maxlen=records_max)
        self._idle: list[_Upstream] = []

    async def _connect(self) -> _Upstream:
        server_hostname = self.host if self.ssl_context is not None else None
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.ssl_context, server_hostname=server_hostname
        )
        return _Upstream(reader, writer)

    async def _exchange(self, request: Request, headers: list[tuple[bytes, bytes]]) -> tuple[_Upstream, h11.Response]:
        """Send ``request`` upstream and read the response head: on a kept-alive connection when one is idle, and
        once more on a new one when that connection turns out closed before any of the response (the upstream
        closes idle connections after its keep-alive timeout; the request had no effect there)."""
        while True:
            pooled = bool(self._idle)
            upstream = self._idle.pop() if pooled else await self._connect()
            try:
                conn = upstream.conn
                upstream.writer.write(
                    conn.send(h11.Request(method=request.method, target=request.target, headers=headers))
                    + conn.send(h11.Data(data=request.body))
                    + conn.send(h11.EndOfMessage())
                )
                head = await upstream.next_event()
                while isinstance(head, h11.InformationalResponse):
                    head = await upstream.next_event()
                if not isinstance(head, h11.Response):
                    raise ConnectionError(f"the upstream sent {type(head).__name__} instead of a response")
                return upstream, head
            except (OSError, h11.ProtocolError):
                upstream.close()
                if not pooled:
                    raise
            except BaseException:
                upstream.close()
                raise

    def close(self) -> None:
        """Close the idle upstream connections."""
        idle, self._idle = self._idle, []
        for upstream in idle:
            upstream.close()

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        request_ms = await _spend(self.request_ms)
        headers = [(k, v) for k, v in request.headers if k not in HOP_BY_HOP and not k.startswith(b":")]
        headers += [
            (b"host", f"{self.host}:{self.port}".encode()),
            (b"content-length", str(len(request.body)).encode()),
        ]
        status: int | None = None
        leading: list[float] = []
        chunks, chunk_ms = 0, 0.0
        try:
            upstream, head = await self._exchange(request, headers)
        except BaseException:
            self.records.append(HopRecord(request.path, status, request_ms, (), chunks, chunk_ms))
            raise
        done = False
        try:
            status = head.status_code
            forwarded = [(k, v) for k, v in head.headers if k not in HOP_BY_HOP]
            chunked = any(k == b"transfer-encoding" and b"chunked" in v.lower() for k, v in head.headers)
            if not chunked:
                body = bytearray()
                while isinstance(event := await upstream.next_event(), h11.Data):
                    body += event.data
                channel.respond(status, forwarded, bytes(body))
            else:
                channel.start(status, forwarded)
                piece = bytearray()
                while isinstance(event := await upstream.next_event(), h11.Data):
                    piece += event.data
                    if not event.chunk_end:
                        continue
                    spent = await _spend(self.chunk_ms)
                    if len(leading) < LEADING_CHUNKS:
                        leading.append(spent)
                    chunks, chunk_ms = chunks + 1, chunk_ms + spent
                    channel.write(bytes(piece))
                    piece.clear()
                    if channel.paused:
                        await channel.drain()
                if piece:
                    channel.write(bytes(piece))
                channel.finish()
            if not isinstance(event, h11.EndOfMessage):
                raise ConnectionError(f"the upstream ended its response with {type(event).__name__}")
            done = upstream.reusable()
        finally:
            if done and len(self._idle) < POOL_SIZE:
                self._idle.append(upstream)
            else:
                upstream.close()
            self.records.append(HopRecord(request.path, status, request_ms, tuple(leading), chunks, chunk_ms))


class HopLab(Served, AsyncService):
    """A lab (the upstream) behind a converting :class:`GatewayHop`. Construct like :class:`~latscope.lab.app.Lab`
    (a :class:`LabSettings` and/or its fields); the hop's costs are :meth:`LabSettings.gateway_hop`'s (none: a
    thin proxy). ``host``/``port``, ``tls``, ``http2`` and the connection settings describe the hop's listener; the
    upstream runs the same settings (so the direct path differs only by the hop) on an ephemeral port of the same
    host.

    Attributes once started: :attr:`url` / :attr:`origin` / :attr:`port` / :attr:`cert_path` (the hop),
    :attr:`direct_url` (the upstream's base URL, what ``--direct`` takes), :attr:`upstream` (the upstream
    :class:`~latscope.lab.app.Lab`: its ``records``, ``cert_path``), :attr:`hop_records` (what the hop spent per
    request), :attr:`faults`, :attr:`scheduler`.
    """

    def __init__(self, settings: LabSettings | None = None, /, **overrides: Any) -> None:
        base = settings if settings is not None else LabSettings()
        settings = dataclasses.replace(base, **overrides) if overrides else base
        self.settings = settings
        self.faults: frozenset[str] = settings.active_faults
        self.request_ms, self.chunk_ms = settings.gateway_hop() or (0.0, 0.0)
        self.upstream = Lab(
            dataclasses.replace(
                settings,
                no_faults=(*settings.no_faults, GATEWAY_OVERHEAD),
                gateway_hop_ms=None,
                gateway_chunk_ms=None,
                port=0,
            )
        )
        self.host = settings.host
        self.port = 0
        self.hop: GatewayHop | None = None
        self._server: HttpServer | None = None
        self._cert: CertFiles | None = None

    @property
    def origin(self) -> str:
        """The hop's ``scheme://host:port``."""
        return origin_of(self.settings.tls, self.host, self.port)

    @property
    def direct_url(self) -> str:
        """The upstream's base URL, served without the hop."""
        return self.upstream.url

    @property
    def upstream_cert_path(self) -> Path | None:
        """The upstream's certificate (TLS), for a client of :attr:`direct_url`."""
        return self.upstream.cert_path

    @property
    def records(self) -> collections.deque[RequestRecord]:
        """The upstream's per-request ground truth (requests through the hop and direct ones alike)."""
        return self.upstream.records

    @property
    def hop_records(self) -> collections.deque[HopRecord]:
        """What the hop spent on each request it forwarded, newest last."""
        return self.hop.records if self.hop is not None else collections.deque()

    @property
    def scheduler(self) -> Scheduler:
        return self.upstream.scheduler

    async def start(self) -> None:
        """Start the upstream, then the hop's listener in front of it."""
        if self._server is not None:
            return
        settings = self.settings
        await self.upstream.start()
        try:
            client_tls = None
            if settings.tls:
                client_tls = ssl.create_default_context(cafile=str(self.upstream.cert_path))
                client_tls.set_alpn_protocols(["http/1.1"])
                self._cert = generate_self_signed(hosts=(settings.host,))
            self.hop = GatewayHop(
                self.upstream.host,
                self.upstream.port,
                request_ms=self.request_ms,
                chunk_ms=self.chunk_ms,
                ssl_context=client_tls,
                records_max=settings.records_max,
            )
            server = HttpServer(self.hop, server_options(settings, self._cert))
            self.host, self.port = await server.start(settings.host, settings.port)
        except BaseException:
            await self._release()
            raise
        self._server = server

    async def stop(self) -> None:
        """Stop the hop's listener (in-flight requests are cancelled), then the upstream."""
        server, self._server = self._server, None
        if server is not None:
            await server.close()
        await self._release()

    async def _release(self) -> None:
        if self.hop is not None:
            self.hop.close()
        with contextlib.suppress(Exception):
            await self.upstream.stop()
        if self._cert is not None:
            remove_cert_files(self._cert)
            self._cert = None


__all__ = ["GatewayHop", "HopLab", "HopRecord"]
