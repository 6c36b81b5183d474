"""Plain values the client API speaks: origins, timeouts, responses of simple GETs, pool statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import orjson

from latscope.sse.limits import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LINE_BYTES, StreamLimits
from latscope.timeline.model import ErrorKind, Phase, Timeline
from latscope.wire.errors import make_error

DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    """Where connections go: ``(scheme, host, port)``; the pool, the TLS session cache and the statistics key on it."""

    scheme: str  #: "http" or "https"
    host: str  #: host name or IP literal (IPv6 without brackets)
    port: int

    @property
    def authority(self) -> str:
        """``host[:port]`` as it goes in ``Host`` / ``:authority`` (port omitted when it is the scheme's default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"

    @property
    def tls(self) -> bool:
        """True for https."""
        return self.scheme == "https"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.authority}"


def split_url(url: str) -> tuple[Origin, str]:
    """``(origin, path?query)`` of an absolute http(s) URL; raises :class:`~latscope.wire.errors.WireError` (phase
    dns, kind "url") for anything else, so a typo reads as a clear error rather than a traceback."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise make_error(f"not an http(s) URL: {url!r}", phase=Phase.DNS, kind=ErrorKind.URL)
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError as exc:
        raise make_error(f"bad port in URL {url!r}: {exc}", phase=Phase.DNS, kind=ErrorKind.URL) from None
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return Origin(scheme, parts.hostname, port), target


def join_url(base_url: str, path: str) -> str:
    """``base_url`` + ``path`` with exactly one slash between them (``http://h/v1`` + ``/models``)."""
    if not path:
        return base_url
    return base_url.rstrip("/") + "/" + path.lstrip("/")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-phase limits, in seconds. A phase that runs over fails with kind "timeout" and names itself.

    ``connect_s`` bounds DNS and TCP connect each; ``headers_s`` runs from the request fully written to the response
    head; ``read_s`` is the longest allowed gap between two reads of the body; ``total_s`` (None: no limit) bounds the
    whole request, pool wait included.
    """

    connect_s: float = 10.0
    tls_s: float = 10.0
    send_s: float = 30.0
    headers_s: float = 120.0
    read_s: float = 120.0
    total_s: float | None = None


#: The most body bytes one response may carry, by default (framing removed, before any content decoding).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """How much of one response the client takes, in bytes; past a limit the request fails with kind "limit" and
    keeps what came before. ``max_line_bytes`` / ``max_event_bytes`` bound what a stream decoder holds (see
    :mod:`latscope.sse.limits`); ``max_body_bytes`` the whole body (an endless stream ends there even without
    ``Timeouts.total_s``). The response head has its own bound in the HTTP layer."""

    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @property
    def stream(self) -> StreamLimits:
        """The stream decoder's part."""
        return StreamLimits(self.max_line_bytes, self.max_event_bytes)


def normalise_base_url(url: str, default_path: str = "/v1") -> str:
    """A base URL as the dialects expect it: no scheme means http; a URL with no path gets ``default_path`` (a
    dialect's ``base_path``: ``/v1`` for OpenAI-style servers, "" for Ollama's native API); a trailing slash is
    dropped."""
    if "://" not in url:
        url = f"http://{url}"
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not slash or not path.strip("/"):
        return f"{scheme}://{host}{default_path}"
    return url.rstrip("/")


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to :meth:`~latscope.wire.Client.get`: the whole body in memory (for ``/v1/models``, ``/metrics``)."""

    status: int
    headers: list[tuple[str, str]]  #: lower-case names, in the order received
    body: bytes
    timeline: Timeline

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        key = name.lower()
        for k, v in self.headers:
            if k == key:
                return v
        return None

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return orjson.loads(self.body)

    def raise_for_status(self) -> Response:
        """Return self for a 2xx/3xx status; raise the recorded :class:`~latscope.wire.errors.WireError` otherwise."""
        if self.status >= 400:
            err = self.timeline.error
            message = err.message if err is not None else f"HTTP {self.status}"
            exc = make_error(message, phase=Phase.HEADERS, kind=ErrorKind.HTTP_STATUS, status=self.status)
            exc.timeline = self.timeline
            raise exc
        return self


@dataclass(slots=True)
class OriginStats:
    """Connection accounting for one origin, over the client's life."""

    connections_opened: int = 0  #: connections that completed setup (TCP, and TLS for https)
    connect_failures: int = 0  #: connection attempts that failed in dns, connect or tls
    requests: int = 0  #: requests that got a connection
    reuses: int = 0  #: requests served by a connection that had carried a request before (keep-alive or HTTP/2)
    tls_sessions_offered: int = 0  #: new TLS connections that offered a saved session
    tls_sessions_resumed: int = 0  #: ... of which the server accepted it
