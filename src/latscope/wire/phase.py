"""One seam for a request's phases: their marks, their deadlines and their errors, for every protocol.

A :class:`Span` turns one operation into started / complete / failed, after the ``Trace`` context manager of
httpcore's ``_trace.py``: entering it sets the phase's start mark on the :class:`~latscope.timeline.model.Timeline`,
leaving it sets the end mark, and an exception that leaves it is mapped onto the phase-named
:class:`~latscope.wire.errors.WireError` in one place (:meth:`Span.failed`). :class:`Sending` is the send phase of
HTTP/1.1, HTTP/2 and HTTP/3 alike. Spans sit at phase boundaries only: nothing here runs per read.

The request's total deadline (``Timeouts.total_s``) is arithmetic of its own, kept here too: where it lies
(:func:`total_deadline`), how much of a phase's own limit it leaves (:func:`budget`, :func:`nearest_limit`), and the
error that names the phase it ran out in (:func:`total_timeout`, :func:`phase_timeout`).
"""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic_ns
from types import TracebackType
from typing import Self

from latscope.timeline.model import ErrorKind, Phase, Timeline
from latscope.wire.errors import WireError, lost_error, make_error, timeout_error

#: maps an exception that ended a phase onto its error; None lets the exception go on as it is (a cancellation)
Failure = Callable[[BaseException], "WireError | None"]

#: the timeline marks (attribute names) that open and close each timed phase
_MARKS: dict[Phase, tuple[str, str]] = {
    Phase.DNS: ("dns_start_ns", "dns_end_ns"),
    Phase.CONNECT: ("connect_start_ns", "connect_end_ns"),
    Phase.TLS: ("tls_start_ns", "tls_end_ns"),
    Phase.SEND: ("send_start_ns", "send_end_ns"),
}


# --- the total deadline ---------------------------------------------------------------------------------------------


def after(start_ns: int, seconds: float) -> int:
    """The monotonic ns ``seconds`` after ``start_ns``."""
    return start_ns + int(seconds * 1e9)


def total_deadline(started_ns: int, total_s: float | None) -> int | None:
    """The monotonic ns by which a request started at ``started_ns`` must have ended (None: ``total_s`` is no
    limit)."""
    return None if total_s is None else after(started_ns, total_s)


def nearest_limit(deadline_ns: int | None, limit_ns: int) -> tuple[int, bool]:
    """``(ns, total)``: the earlier of a phase's own limit ``limit_ns`` and the request's total deadline (monotonic
    ns; the total one when both fall together), and whether it is the total one."""
    if deadline_ns is not None and deadline_ns <= limit_ns:
        return deadline_ns, True
    return limit_ns, False


def seconds_left(deadline_ns: int) -> float:
    """Seconds from now until ``deadline_ns`` (monotonic ns), at least 0."""
    return max(0.0, (deadline_ns - monotonic_ns()) / 1e9)


def budget(deadline_ns: int | None, limit_s: float) -> tuple[float, bool]:
    """``(seconds, total)``: how long a phase whose own limit is ``limit_s`` may take now, in seconds (at least 0),
    and whether the request's total deadline, not that limit, is what bounds it (then a timeout means the total
    one)."""
    if deadline_ns is None:
        return limit_s, False
    left_s = (deadline_ns - monotonic_ns()) / 1e9
    if left_s < limit_s:
        return max(0.0, left_s), True
    return limit_s, False


def total_timeout(total_s: float | None, phase: Phase) -> WireError:
    """The request's total limit of ``total_s`` seconds ran out during ``phase``."""
    return timeout_error(phase, f"total timeout of {total_s:g} s exceeded during {phase}")


def phase_timeout(phase: Phase, total: bool, total_s: float | None, message: str) -> WireError:
    """A timeout in ``phase``: the total one when ``total`` (see :func:`budget`), else the phase's own, ``message``."""
    return total_timeout(total_s, phase) if total else timeout_error(phase, message)


# --- spans ------------------------------------------------------------------------------------------------------------


class Span:
    """One phase of ``t`` timed as a context manager: its start mark on entry (unless ``start`` is False, when
    :meth:`begin` sets it), its end mark on exit, whatever happened, from ``stamp`` when that gives one (the stamp of
    the read that completed a handshake), else from :attr:`end_ns` when the body set it, else now. An exception
    leaving the span goes through ``fail``: the error it returns is raised instead (from None), None lets it go
    on."""

    __slots__ = ("_end", "_fail", "_stamp", "_start", "_start_on_enter", "_t", "end_ns")

    def __init__(
        self,
        t: Timeline,
        phase: Phase,
        fail: Failure | None = None,
        *,
        start: bool = True,
        stamp: Callable[[], int | None] | None = None,
    ) -> None:
        self._t = t
        self._start, self._end = _MARKS[phase]
        self._start_on_enter = start
        self._fail = fail
        self._stamp = stamp
        self.end_ns = 0  #: the end mark to set on exit, when the body knows it better than "now"

    def __enter__(self) -> Self:
        if self._start_on_enter:
            setattr(self._t, self._start, monotonic_ns())
        return self

    def begin(self) -> None:
        """Set the start mark now (a span entered with ``start=False``: the phase starts inside it)."""
        setattr(self._t, self._start, monotonic_ns())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end_ns = self._stamp() if self._stamp is not None else None
        setattr(self._t, self._end, end_ns or self.end_ns or monotonic_ns())
        if exc is not None:
            self._reraise(exc)

    def _reraise(self, exc: BaseException) -> None:
        """Raise the error :meth:`failed` maps ``exc`` onto, if any."""
        err = self.failed(exc)
        if err is not None:
            try:
                raise err from None
            finally:
                # the error's traceback holds this frame: unbound, frame and error form no cycle (which only the
                # cyclic collector would free, and the load generator keeps it off while it measures)
                err = None

    def failed(self, exc: BaseException) -> WireError | None:
        """The error an exception that ended the phase becomes (None: it goes on unchanged)."""
        return None if self._fail is None else self._fail(exc)


class Sending(Span):
    """The send phase of one request on any protocol: ``send_start_ns`` when :meth:`begin` is called (the request is
    prepared), ``headers_sent_ns`` at :meth:`headers_sent`, ``send_end_ns`` on exit. An exception leaving it becomes
    the protocol's own error where ``protocol_error`` names one, a send timeout (``limit_s`` seconds,
    ``body_bytes`` bytes of body), or the connection lost while sending."""

    __slots__ = ("_body_bytes", "_limit_s", "_protocol_error")

    # Once per request: the marks are set by name rather than looked up (Span's own slots for them stay unset).
    def __init__(self, t: Timeline, limit_s: float, body_bytes: int, protocol_error: Failure) -> None:
        self._t = t
        self._limit_s = limit_s
        self._body_bytes = body_bytes
        self._protocol_error = protocol_error

    def __enter__(self) -> Self:
        return self

    def begin(self) -> None:
        self._t.send_start_ns = monotonic_ns()

    def headers_sent(self) -> None:
        """The request head was handed to the transport."""
        self._t.headers_sent_ns = monotonic_ns()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._t.send_end_ns = monotonic_ns()
        if exc is not None:
            self._reraise(exc)

    def failed(self, exc: BaseException) -> WireError | None:
        err = self._protocol_error(exc)
        if err is not None:
            return err
        if isinstance(exc, TimeoutError):
            return timeout_error(
                Phase.SEND,
                f"writing the request took longer than {self._limit_s:g} s ({self._body_bytes} body bytes)",
            )
        if isinstance(exc, OSError):
            return lost_error(exc, Phase.SEND, "while sending the request")
        return None


def protocol_error(
    errors: type[BaseException] | tuple[type[BaseException], ...], prefix: str, kind: ErrorKind = ErrorKind.PROTOCOL
) -> Failure:
    """A :class:`Sending` ``protocol_error`` for a protocol library: its ``errors`` become send-phase errors of
    ``kind`` reading "``prefix``: the library's message"."""

    def mapped(exc: BaseException) -> WireError | None:
        if isinstance(exc, errors):
            return make_error(f"{prefix}: {exc}", phase=Phase.SEND, kind=kind)
        return None

    return mapped
