"""The client's errors: one small hierarchy, each class naming the phase that failed.

:meth:`latscope.wire.Client.request` never raises for a failed request; it records a
:class:`~latscope.timeline.model.RequestError` in the timeline and returns it. :class:`WireError` is the exception form
of that record (``WireError.from_timeline`` / :func:`check`) for callers that prefer exceptions, and what
:meth:`~latscope.wire.Client.get` raises. Low-level exceptions (``OSError``, ``ssl.SSLError``, h11/h2 errors) are
mapped onto ``(phase, kind, message)`` in this module only, so the wording is consistent everywhere.
"""

from __future__ import annotations

import errno
import socket
import ssl
import time

from latscope.timeline.model import ErrorKind, Phase, RequestError, Timeline
from latscope.timeline.redact import scrub


class WireError(Exception):
    """A request failed. ``phase`` says where, ``kind`` is a short machine-readable cause, ``str(err)`` reads
    "TLS handshake failed: certificate verify failed"; ``timeline`` holds everything measured before the failure."""

    def __init__(
        self,
        message: str,
        *,
        phase: Phase,
        kind: ErrorKind,
        status: int | None = None,
        timeline: Timeline | None = None,
    ) -> None:
        message = scrub(message)  # a library's message may quote the header it refused
        super().__init__(message)
        self.message = message
        self.phase = phase
        self.kind = kind
        self.status = status
        self.timeline = timeline

    def to_record(self, at_ns: int | None = None) -> RequestError:
        """This error as the timeline's :class:`RequestError` (detected at ``at_ns``, default now)."""
        when = time.monotonic_ns() if at_ns is None else at_ns
        return RequestError(phase=self.phase, kind=self.kind, message=self.message, at_ns=when, status=self.status)

    @classmethod
    def from_timeline(cls, timeline: Timeline) -> WireError:
        """The exception for a timeline whose ``error`` is set, of the subclass matching its phase."""
        err = timeline.error
        if err is None:
            raise ValueError("the timeline has no error")
        sub = _BY_PHASE.get(err.phase, WireError)
        return sub(err.message, phase=err.phase, kind=err.kind, status=err.status, timeline=timeline)


class PoolError(WireError):
    """Waiting for a connection from the client's pool failed (timed out)."""


class DNSError(WireError):
    """Name resolution failed (``getaddrinfo``)."""


class ConnectError(WireError):
    """The TCP connection could not be established (refused, unreachable, timed out)."""


class TLSError(WireError):
    """The TLS handshake failed (certificate verification, protocol mismatch, closed during the handshake)."""


class SendError(WireError):
    """Writing the request failed (connection closed or reset, timed out)."""


class ResponseError(WireError):
    """No usable response head: timeout waiting for it, an HTTP error status, a wrong content type."""


class StreamError(WireError):
    """The response body failed: reset or truncated mid-stream, invalid stream data, no data within the read timeout."""


_BY_PHASE: dict[Phase, type[WireError]] = {
    Phase.POOL: PoolError,
    Phase.DNS: DNSError,
    Phase.CONNECT: ConnectError,
    Phase.TLS: TLSError,
    Phase.SEND: SendError,
    Phase.HEADERS: ResponseError,
    Phase.STREAM: StreamError,
}


class ModelListError(Exception):
    """The server answered, but not with a model list (an error status, another body, an empty list). The message
    says which URL answered what; ``timeline`` is that request's."""

    def __init__(self, message: str, timeline: Timeline) -> None:
        message = scrub(message)
        super().__init__(message)
        self.message = message
        self.timeline = timeline


def make_error(message: str, *, phase: Phase, kind: ErrorKind, status: int | None = None) -> WireError:
    """A :class:`WireError` of the subclass for ``phase``."""
    return _BY_PHASE.get(phase, WireError)(message, phase=phase, kind=kind, status=status)


def fail_unfinished(t: Timeline, kind: ErrorKind, message: str) -> None:
    """Close a timeline that the client never finished — a request cancelled while it waited to be sent, or one a
    caller's own bug interrupted: the error (unless it already has one, which is kept), the end mark, and the start
    mark when the request never left the caller's queue (its whole life was client queue time)."""
    now = time.monotonic_ns()
    if not t.started_ns:
        t.started_ns = now
    if t.error is None:
        t.error = RequestError(t.phase_reached(), kind, scrub(message), now)
    if t.ended_ns is None:
        t.ended_ns = now


def check(timeline: Timeline) -> Timeline:
    """Return ``timeline`` when it has no error, else raise the matching :class:`WireError`."""
    if timeline.error is not None:
        raise WireError.from_timeline(timeline)
    return timeline


def connect_error(exc: OSError, host: str, port: int) -> WireError:
    """Map a failed TCP connect onto a :class:`ConnectError`."""
    where = f"TCP connect to {host}:{port} failed"
    if isinstance(exc, ConnectionRefusedError):
        return make_error(f"{where}: connection refused", phase=Phase.CONNECT, kind=ErrorKind.REFUSED)
    if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
        return make_error(f"{where}: {exc.strerror or 'unreachable'}", phase=Phase.CONNECT, kind=ErrorKind.UNREACHABLE)
    return make_error(f"{where}: {exc.strerror or exc}", phase=Phase.CONNECT, kind=ErrorKind.CONNECT)


def dns_error(exc: BaseException, host: str, timeout_s: float) -> WireError | None:
    """Map a failed lookup of ``host`` (within ``timeout_s`` s) onto a :class:`DNSError`; None for anything else."""
    if isinstance(exc, socket.gaierror):
        return make_error(f"DNS lookup of {host} failed: {exc.strerror}", phase=Phase.DNS, kind=ErrorKind.DNS)
    if isinstance(exc, TimeoutError):
        return timeout_error(Phase.DNS, f"DNS lookup of {host} took longer than {timeout_s:g} s")
    return None


def tls_error(exc: BaseException) -> WireError:
    """Map a failed TLS handshake onto a :class:`TLSError`."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = exc.verify_message or exc.reason or str(exc)
        return make_error(
            f"TLS handshake failed: certificate verify failed: {detail}", phase=Phase.TLS, kind=ErrorKind.CERT_VERIFY
        )
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or exc.strerror or str(exc)
        return make_error(
            f"TLS handshake failed: {reason.lower().replace('_', ' ')}", phase=Phase.TLS, kind=ErrorKind.TLS
        )
    if isinstance(exc, ConnectionResetError):
        return make_error("TLS handshake failed: connection reset by the server", phase=Phase.TLS, kind=ErrorKind.RESET)
    if isinstance(exc, (ConnectionError, EOFError)):
        return make_error(
            "TLS handshake failed: connection closed by the server", phase=Phase.TLS, kind=ErrorKind.CLOSED
        )
    return make_error(f"TLS handshake failed: {exc}", phase=Phase.TLS, kind=ErrorKind.TLS)


def lost_error(exc: BaseException | None, phase: Phase, context: str) -> WireError:
    """Map a connection lost (``exc`` None: closed cleanly by the peer) during ``phase`` onto an error.

    ``context`` completes the sentence, e.g. "while reading the stream (after 12 events, 3456 bytes)".
    """
    if isinstance(exc, ConnectionResetError):
        return make_error(f"connection reset by peer {context}", phase=phase, kind=ErrorKind.RESET)
    if exc is None or isinstance(exc, (ConnectionError, EOFError)):
        return make_error(f"connection closed by the server {context}", phase=phase, kind=ErrorKind.CLOSED)
    if isinstance(exc, ssl.SSLError):
        return make_error(f"TLS error {context}: {exc.reason or exc}", phase=phase, kind=ErrorKind.TLS)
    return make_error(f"connection lost {context}: {exc}", phase=phase, kind=ErrorKind.LOST)


def timeout_error(phase: Phase, message: str) -> WireError:
    """A timeout in ``phase``."""
    return make_error(message, phase=phase, kind=ErrorKind.TIMEOUT)
