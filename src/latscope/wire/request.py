"""What a request sends: header sets, merged once per combination of origin, method, target and header lists and
reused, and how much of a body goes out with the head.

A load generator sends thousands of requests whose headers differ in two values only, the body's length and the
client's own ``traceparent``. Merging the lists, redacting them for the timeline and (for HTTP/1.1) having h11 write
them cost more per request than recording a short stream, so :class:`HeaderSet` does that work once; each request
then fills the two *slots* (:meth:`HeaderSet.fill`). The HTTP/1.1 head is still written by h11, once per set, with
placeholder values in the slots (:mod:`latscope.wire.http11`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from latscope.timeline.model import ErrorKind, Phase, Timeline
from latscope.timeline.redact import control_character, is_secret_header, redact_headers, register_secret_headers
from latscope.wire.errors import make_error
from latscope.wire.trace import new_traceparent

#: request bodies up to this size go out in the same write as the head: one system call and, with TCP_NODELAY, one
#: segment train instead of two, which the server reads in one go. A larger body is written after the head, so that
#: ``headers_sent_ns`` → ``send_end_ns`` shows its upload (and it is not copied to be joined).
COALESCE_BODY_BYTES = 64 * 1024

#: methods whose requests carry a Content-Length even when the body is empty (RFC 9110 §8.6: a user agent SHOULD
#: send it for a method that defines a meaning for enclosed content)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class Outgoing(NamedTuple):
    """One request as a connection writes it.

    ``target`` is the request target (path and query); ``headers`` the fields to send, the per-request slots
    filled (:meth:`HeaderSet.fill`); ``header_set`` the set they were filled from, which lets a connection reuse
    work done for the set's earlier requests (the HTTP/1.1 head h11 wrote), or None for fields given as they are.
    """

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    header_set: HeaderSet | None = None


class HeaderSet:
    """The merged request header fields for one combination, with slots for the per-request values.

    ``fields`` — ``(name, value)`` pairs in sending order, names as given; ``length_at`` — the index of
    ``Content-Length`` (None: the request has none), ``trace_at`` — the index of the client's own ``traceparent``
    (None: none is generated); the slots hold placeholder values here. ``trace_id`` — the trace id of a
    ``traceparent`` the caller set itself. ``redacted`` — the fields as the timeline records them (lower-case names,
    secrets replaced). ``uses`` and ``http11`` belong to the HTTP/1.1 connection: how often the set was sent, and the
    head h11 wrote for it.
    """

    __slots__ = ("fields", "http11", "length_at", "redacted", "trace_at", "trace_id", "uses")

    def __init__(
        self, fields: list[tuple[str, str]], *, length_at: int | None, trace_at: int | None, trace_id: str | None
    ) -> None:
        self.fields = fields
        self.length_at = length_at
        self.trace_at = trace_at
        self.trace_id = trace_id
        self.redacted = redact_headers(fields)
        self.uses = 0
        self.http11: object | None = None

    def fill(self, body_bytes: int, t: Timeline) -> list[tuple[str, str]]:
        """One request's fields: the slots filled (the body's length, a fresh ``traceparent``); ``t`` gets the
        redacted fields and the trace id."""
        fields = self.fields.copy()
        redacted = self.redacted.copy()
        if self.length_at is not None:
            length = str(body_bytes)
            fields[self.length_at] = ("Content-Length", length)
            redacted["content-length"] = length
        if self.trace_at is not None:
            value, t.trace_id, t.span_id = new_traceparent()
            fields[self.trace_at] = ("traceparent", value)
            redacted["traceparent"] = value
        else:
            t.trace_id = self.trace_id
        t.request_headers = redacted
        return fields


def merge_headers(
    host: tuple[str, str],
    user_agent: str,
    sources: Sequence[Sequence[tuple[str, str]]],
    *,
    with_length: bool,
    trace_context: bool,
) -> HeaderSet:
    """Host and User-Agent, then each source's fields in turn (a later name replaces an earlier one, keeping its
    place), Content-Length when ``with_length``, and a ``traceparent`` slot unless a source set one (or
    ``trace_context`` is off). Transfer-Encoding is dropped: the body is sent whole, with a length.

    Raises an ``invalid-request`` :class:`~latscope.wire.errors.WireError` for a field value with a control character
    (naming the field, the character and its position, never the value); the values of credential-named fields are
    registered as secrets (:func:`~latscope.timeline.redact.register_secret_headers`) before anything can echo them.
    """
    merged: dict[str, tuple[str, str]] = {"host": host, "user-agent": ("User-Agent", user_agent)}
    for source in sources:
        for name, value in source:
            merged[name.lower()] = (name, value)
    register_secret_headers(merged.values())
    for name, value in merged.values():
        found = control_character(value)
        if found is not None:
            position, char = found
            shown = "its value is not shown" if is_secret_header(name) else f"value {value!r}"
            raise make_error(
                f"invalid request: header {name!r} has a {char} at position {position} of its value, which HTTP "
                f"does not allow ({shown}; a key read from a file with CRLF line endings ends in one)",
                phase=Phase.SEND,
                kind=ErrorKind.INVALID_REQUEST,
            )
    if with_length:
        merged["content-length"] = ("Content-Length", "0")
    merged.pop("transfer-encoding", None)
    trace_id: str | None = None
    given = merged.get("traceparent")
    if given is not None:
        parts = given[1].split("-")
        trace_id = parts[1] if len(parts) == 4 else None
    elif trace_context:
        merged["traceparent"] = ("traceparent", "")
    keys = list(merged)
    return HeaderSet(
        list(merged.values()),
        length_at=keys.index("content-length") if with_length else None,
        trace_at=keys.index("traceparent") if given is None and trace_context else None,
        trace_id=trace_id,
    )
