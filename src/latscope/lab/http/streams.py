"""What the multiplexed protocols (HTTP/2 and HTTP/3) share: the request a stream carries, a response channel per
request stream, and the counting of the connections a listener accepts."""

from __future__ import annotations

import abc
from typing import Protocol

from latscope.lab.http.exchange import ConnectionInfo, Headers, Request, ResponseChannel
from latscope.lab.http.session import now_ns

#: Headers that are connection-specific in HTTP/1.1 and forbidden in HTTP/2 and HTTP/3 (RFC 9113 §8.2.2,
#: RFC 9114 §4.2).
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"})


def head_block(status: int, headers: Headers, extra: Headers) -> list[tuple[bytes, bytes]]:
    """A response head as a field block: ``:status``, the handler's headers less the hop-by-hop ones, ``extra``."""
    return [
        (b":status", str(status).encode()),
        *((name, value) for name, value in headers if name not in HOP_BY_HOP),
        *extra,
    ]


class ReceivedStream(Protocol):
    """What a session keeps of a request stream while its body arrives."""

    stream_id: int
    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: list[bytes]  #: the body's pieces so far
    started_ns: int  #: monotonic ns when its head arrived


def complete_request(stream: ReceivedStream, info: ConnectionInfo) -> Request:
    """The request whose last body byte ``stream`` just received, counted on its connection ``info``; the stream
    lets go of the body's pieces."""
    info.requests += 1
    body = b"".join(stream.body)
    stream.body = []
    return Request(
        method=stream.method,
        target=stream.target,
        headers=stream.headers,
        body=body,
        connection=info,
        index_on_connection=info.requests,
        started_ns=stream.started_ns,
        received_ns=now_ns(),
        stream_id=stream.stream_id,
    )


class StreamChannel(ResponseChannel):
    """The response side of one request stream of a multiplexed connection: a subclass sends the head and the
    data frames (:meth:`_send_data`) and says when its connection is gone (:attr:`_connection_lost`)."""

    def __init__(self) -> None:
        self._finished = False
        self.reset = False  #: the client reset this stream
        self.headers_sent_ns: int | None = None
        self.body_bytes = 0
        self.write_calls = 0

    @property
    @abc.abstractmethod
    def _connection_lost(self) -> bool:
        """True once the connection that carries the stream is gone."""

    @abc.abstractmethod
    def _send_data(self, data: bytes, end: bool) -> None:
        """Put ``data`` on the stream (``end``: and end it) and on the wire."""

    @property
    def closed(self) -> bool:
        return self.reset or self._connection_lost

    @property
    def finished(self) -> bool:
        return self._finished

    def write(self, data: bytes) -> None:
        if not data or self.closed:
            return
        self.write_calls += 1
        self.body_bytes += len(data)
        self._send_data(data, False)

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if not self.closed:
            self._send_data(b"", True)


class ConnectionCounter:
    """Numbers the connections a listener accepts, from 1."""

    _connection_count = 0

    def next_connection_id(self) -> int:
        self._connection_count += 1
        return self._connection_count

    @property
    def connections_accepted(self) -> int:
        """Connections that reached HTTP since start (ground truth for connection-reuse checks)."""
        return self._connection_count
