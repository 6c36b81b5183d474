"""What a request handler sees: the request, a channel to answer on, and the facts of the connection it came on.

The HTTP/1.1 and HTTP/2 sessions both produce a :class:`Request` and a :class:`ResponseChannel`, so the lab's
handlers never know which protocol carries them. Header names are lowercase ``bytes`` (h11 lowercases them; HTTP/2
requires lowercase on the wire, RFC 9113 §8.2.1).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

Headers = Sequence[tuple[bytes, bytes]]


@dataclass(slots=True)
class ConnectionInfo:
    """Facts about one accepted TCP connection, filled in as they become known (ground truth for the client's view).

    ``connection_id`` counts connections from 1 in accept order; ``requests`` is how many requests the connection
    has carried so far (a request's ``index_on_connection`` > 1 means the client reused the connection).
    """

    connection_id: int
    peer: str  #: "host:port" of the client
    opened_ns: int  #: monotonic ns when the TCP connection was accepted
    nodelay: bool  #: TCP_NODELAY as set on the socket (False: Nagle's algorithm is on)
    tls: bool = False
    tls_version: str | None = None  #: "TLSv1.3" …, None over plain TCP
    session_reused: bool = False  #: the TLS handshake resumed a session (ticket or cache)
    alpn: str | None = None  #: protocol chosen by ALPN ("h2", "http/1.1"), None when none was negotiated
    http_version: str = "1.1"  #: "1.1", "1.0" (from the request line), "2" or "3" (QUIC: :mod:`.http3`)
    requests: int = 0  #: requests received on this connection so far


@dataclass(slots=True)
class Request:
    """One complete HTTP request (head and body), as handed to the handler.

    ``started_ns`` is when the first byte of this request was read (for a reused connection: of this request, not of
    the connection); ``received_ns`` is when its last body byte was read. Both are :func:`time.monotonic_ns`.
    """

    method: str
    target: str  #: request target as sent, query included
    headers: list[tuple[bytes, bytes]]
    body: bytes
    connection: ConnectionInfo
    index_on_connection: int  #: 1 for the first request on its connection
    started_ns: int
    received_ns: int
    stream_id: int | None = None  #: HTTP/2 stream id; None over HTTP/1.x
    path: str = field(init=False)  #: ``target`` without the query string

    def __post_init__(self) -> None:
        self.path = self.target.split("?", 1)[0]

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lowercase), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class ResponseChannel(abc.ABC):
    """Where a handler writes its response; implemented by the HTTP/1.1 and HTTP/2 sessions.

    Either :meth:`respond` once (a complete response with a known length), or :meth:`start`, any number of
    :meth:`write` calls and :meth:`finish` (a streamed body). Every :meth:`write` becomes exactly one transport write,
    which is what makes Nagle's algorithm and buffering faults observable per event. Once the client is gone
    (:attr:`closed`), writes are dropped silently: the handler learns about it by being cancelled.
    """

    #: monotonic ns when the response head was written (None before)
    headers_sent_ns: int | None = None
    #: body bytes passed to :meth:`write` / :meth:`respond`, before HTTP framing
    body_bytes: int = 0
    #: :meth:`write` calls (one transport write each)
    write_calls: int = 0

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once the connection is gone or the stream was reset: nothing more reaches the client."""

    @property
    @abc.abstractmethod
    def paused(self) -> bool:
        """True while the transport's write buffer is above its high-water mark (await :meth:`drain`)."""

    @property
    @abc.abstractmethod
    def finished(self) -> bool:
        """True once the response is complete (:meth:`respond` or :meth:`finish` ran)."""

    @abc.abstractmethod
    def respond(self, status: int, headers: Headers, body: bytes) -> None:
        """Send a complete response: head and body in one write, ``content-length`` added."""

    @abc.abstractmethod
    def start(self, status: int, headers: Headers) -> None:
        """Send the head of a streamed response (HTTP/1.1: chunked transfer coding)."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send one piece of the streamed body as one transport write (empty ``data`` is ignored)."""

    @abc.abstractmethod
    def finish(self) -> None:
        """End the streamed body."""

    @abc.abstractmethod
    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark (returns at once otherwise)."""


#: A request handler: answers ``request`` on ``channel``. It is cancelled when the client goes away.
Handler = Callable[[Request, ResponseChannel], Awaitable[None]]
