"""The lab's front door: what an edge in front of the service does to every request before the gateway sees it.

* Trace context (W3C Trace Context Level 2, https://www.w3.org/TR/trace-context-2/#traceresponse-header): every
  response carries ``traceresponse`` naming the trace the lab recorded the request under. A request with a valid
  ``traceparent`` keeps its trace id (the lab's span gets a fresh span id); one without starts a new trace. Under
  the ``drop-trace-context`` fault the edge strips the incoming ``traceparent`` before the service sees it, as a
  proxy that does not propagate trace context would, so the trace id that comes back is a new one.
* ``response-cache`` fault: a cache keyed on method, path and request body. The first request of a key is answered
  by the service (``X-Cache: MISS``) and its response stored whole; a repeat is replayed from storage at once, with
  ``Age`` (seconds since it was stored, RFC 9111 §5.1) and ``X-Cache: HIT`` — nothing is generated for it.
  ``silent-response-cache`` is the same cache adding no header at all.
* ``header-scan`` fault: the request waits 0.5 ms per KB of its headers before the service sees it.

All wrap a :data:`~latscope.lab.http.exchange.Handler` and the :class:`ResponseChannel` it writes to, so the stages
behind them are unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from dataclasses import dataclass, field

from latscope.lab.http.exchange import Handler, Headers, Request, ResponseChannel
from latscope.lab.stageknobs import FrontKnobs

#: Responses the ``response-cache`` fault keeps at most (oldest dropped first): bounded memory for a long-lived lab.
CACHE_ENTRIES = 256


def _hex_id(nbytes: int) -> str:
    value = "0" * (2 * nbytes)
    while value == "0" * (2 * nbytes):  # an all-zero id is invalid (Trace Context §3.2.2.3, §3.2.2.4)
        value = secrets.token_hex(nbytes)
    return value


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(ch in "0123456789abcdef" for ch in text)


def trace_response(traceparent: bytes | None) -> bytes:
    """The ``traceresponse`` value for a request that carried ``traceparent`` (None: it carried none): the incoming
    trace id and flags when the header is a valid version-00 one, else a new trace; always a fresh span id."""
    trace_id, flags = _hex_id(16), "01"
    if traceparent is not None:
        fields = traceparent.decode("latin-1").strip(" \t").split("-")
        if (
            len(fields) == 4
            and fields[0] == "00"
            and _is_hex(fields[1], 32)
            and fields[1] != "0" * 32
            and _is_hex(fields[2], 16)
            and fields[2] != "0" * 16
            and _is_hex(fields[3], 2)
        ):
            trace_id, flags = fields[1], fields[3]
    return f"00-{trace_id}-{_hex_id(8)}-{flags}".encode()


class ForwardingChannel(ResponseChannel):
    """A channel that passes everything to ``inner``; subclasses change the head or keep a copy."""

    def __init__(self, inner: ResponseChannel) -> None:
        self.inner = inner

    # The counters the sessions keep on the channel live on ``inner``; reading or setting them here goes there.
    @property
    def headers_sent_ns(self) -> int | None:
        return self.inner.headers_sent_ns

    @headers_sent_ns.setter
    def headers_sent_ns(self, value: int | None) -> None:
        self.inner.headers_sent_ns = value

    @property
    def body_bytes(self) -> int:
        return self.inner.body_bytes

    @body_bytes.setter
    def body_bytes(self, value: int) -> None:
        self.inner.body_bytes = value

    @property
    def write_calls(self) -> int:
        return self.inner.write_calls

    @write_calls.setter
    def write_calls(self, value: int) -> None:
        self.inner.write_calls = value

    @property
    def closed(self) -> bool:
        return self.inner.closed

    @property
    def paused(self) -> bool:
        return self.inner.paused

    @property
    def finished(self) -> bool:
        return self.inner.finished

    def head(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        """The response head's headers as sent on (unchanged here)."""
        return list(headers)

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self.inner.respond(status, self.head(headers), body)

    def start(self, status: int, headers: Headers) -> None:
        self.inner.start(status, self.head(headers))

    def write(self, data: bytes) -> None:
        self.inner.write(data)

    def finish(self) -> None:
        self.inner.finish()

    async def drain(self) -> None:
        await self.inner.drain()


class _ExtraHeaders(ForwardingChannel):
    def __init__(self, inner: ResponseChannel, extra: list[tuple[bytes, bytes]]) -> None:
        super().__init__(inner)
        self.extra = extra

    def head(self, headers: Headers) -> list[tuple[bytes, bytes]]:
        return [*headers, *self.extra]


class TraceContextEdge:
    """Answers every request with ``traceresponse``; ``drop`` strips the incoming ``traceparent`` first."""

    def __init__(self, inner: Handler, *, drop: bool) -> None:
        self.inner = inner
        self.drop = drop

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        if self.drop:
            request.headers = [(k, v) for k, v in request.headers if k != b"traceparent"]
        value = trace_response(request.header(b"traceparent"))
        await self.inner(request, _ExtraHeaders(channel, [(b"traceresponse", value)]))


#: Requests whose held time :class:`HeaderScanEdge` keeps (the latest; a long-running lab keeps no more).
HELD_KEPT = 4096


class HeaderScanEdge:
    """The ``header-scan`` fault: waits ``ms_per_kb`` per KB of the request's headers before handing it on, as a
    gateway that runs a rule set over every header value does."""

    def __init__(self, inner: Handler, *, ms_per_kb: float) -> None:
        self.inner = inner
        self.ms_per_kb = ms_per_kb
        #: (head bytes, ms the request was really held) of the latest requests: ground truth, as the loop's timers
        #: round a sleep up (the held time per KB came out 0.52 ms for the nominal 0.5 here)
        self.held: collections.deque[tuple[int, float]] = collections.deque(maxlen=HELD_KEPT)

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        head_bytes = sum(len(name) + len(value) + 4 for name, value in request.headers)
        started = time.perf_counter()
        await asyncio.sleep(self.ms_per_kb * head_bytes / 1024 / 1000)
        self.held.append((head_bytes, (time.perf_counter() - started) * 1000))
        await self.inner(request, channel)


@dataclass(slots=True)
class StoredResponse:
    """A response as the cache keeps it: status, head, body pieces in order, and when it was stored (monotonic s)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    stored_s: float
    streamed: bool
    body: list[bytes] = field(default_factory=list)
    complete: bool = False


class _Recording(_ExtraHeaders):
    def __init__(self, inner: ResponseChannel, *, announce: bool) -> None:
        super().__init__(inner, [(b"x-cache", b"MISS")] if announce else [])
        self.stored: StoredResponse | None = None

    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        self.stored = StoredResponse(status, list(headers), time.monotonic(), False, [body], True)
        super().respond(status, headers, body)

    def start(self, status: int, headers: Headers) -> None:
        self.stored = StoredResponse(status, list(headers), time.monotonic(), True)
        super().start(status, headers)

    def write(self, data: bytes) -> None:
        if self.stored is not None and data:
            self.stored.body.append(data)
        super().write(data)

    def finish(self) -> None:
        if self.stored is not None:
            self.stored.complete = True
        super().finish()


class ResponseCacheEdge:
    """The ``response-cache`` fault (see the module docstring): stores complete 200 responses to POST requests by
    method, path and body, and replays them at once. ``announce``: say so in ``X-Cache`` and ``Age`` (without it
    the replay is the stored response byte for byte, as a cache that adds no header sends it)."""

    def __init__(self, inner: Handler, *, announce: bool = True, entries: int = CACHE_ENTRIES) -> None:
        self.inner = inner
        self.announce = announce
        self.entries = entries
        self.store: dict[tuple[str, str, bytes], StoredResponse] = {}
        self.hits = 0
        #: the stored responses replayed at least once, by key
        self.replayed: set[tuple[str, str, bytes]] = set()

    async def __call__(self, request: Request, channel: ResponseChannel) -> None:
        if request.method != "POST":
            await self.inner(request, channel)
            return
        key = (request.method, request.path, bytes(request.body))
        stored = self.store.get(key)
        if stored is not None:
            self.hits += 1
            self.replayed.add(key)
            self._replay(stored, channel, self.announce)
            return
        recording = _Recording(channel, announce=self.announce)
        await self.inner(request, recording)
        kept = recording.stored
        if kept is not None and kept.complete and kept.status == 200 and not channel.closed:
            if len(self.store) >= self.entries:
                del self.store[next(iter(self.store))]
            self.store[key] = kept

    @staticmethod
    def _replay(stored: StoredResponse, channel: ResponseChannel, announce: bool) -> None:
        age = str(int(time.monotonic() - stored.stored_s)).encode()
        headers = [*stored.headers, (b"age", age), (b"x-cache", b"HIT")] if announce else stored.headers
        if not stored.streamed:
            channel.respond(stored.status, headers, b"".join(stored.body))
            return
        channel.start(stored.status, headers)
        for piece in stored.body:
            channel.write(piece)
        channel.finish()


def front_door(inner: Handler, knobs: FrontKnobs) -> Handler:
    """The service behind its edge: trace context handling always, the header scan and the response cache when
    the faults put them there (the cache sits in front, so a replayed response carries the ``traceresponse`` it was
    stored with and skips the scan)."""
    handler: Handler = inner
    if knobs.header_scan_ms_per_kb is not None:
        handler = HeaderScanEdge(handler, ms_per_kb=knobs.header_scan_ms_per_kb)
    handler = TraceContextEdge(handler, drop=knobs.drop_trace_context)
    if knobs.response_cache is not None:
        handler = ResponseCacheEdge(handler, announce=knobs.response_cache == "headers")
    return handler


__all__ = [
    "ForwardingChannel",
    "HeaderScanEdge",
    "ResponseCacheEdge",
    "StoredResponse",
    "TraceContextEdge",
    "front_door",
    "trace_response",
]
