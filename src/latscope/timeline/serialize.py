"""Versioned JSON serialisation of timelines (schema ``latscope.timeline/2``; schema 1 is still read).

Layout: one JSON object per timeline. Marks are absolute ``time.monotonic_ns()`` integers (only differences are
meaningful; they are exact). ``reads`` is ``[[at_ns, nbytes], ...]`` and ``events`` is
``[[at_ns, read_index, kind, text_chars, tokens, server_sent_ns, choice], ...]`` to keep long streams compact.

Schema 2 (from schema 1): every event has a seventh item, its ``choice`` index; ``kind`` may be ``tool_call``; the
mark ``first_text_ns`` exists. A schema-1 record reads with choice 0 on every event and no ``first_text_ns`` (None:
it cannot be told apart from ``first_token_ns`` afterwards). A reader of schema 1 refuses schema 2 by its name, so a
record is never half-understood. Headers and
trailers are written redacted (see :mod:`latscope.timeline.redact`): :func:`timeline_to_dict` redacts them whatever the
timeline holds, so a caller that filled a timeline by hand cannot leak a key either. ``response_trailers`` was added
to schema 1 later; a record without it reads as having none; so was ``span_id`` (absent: None), and so were
``retries`` (the earlier attempts of a logical request the caller sent again; absent: none), ``idempotency_key``
and ``response_id`` (absent: None). ``read_user_ns`` came later still: present only when some read was kernel-stamped
(:class:`~latscope.timeline.model.StampSource`), one item per read, the user-space stamp of a kernel-stamped read
and null for a user-stamped one (absent: every read was user-stamped). ``body_trace_ids`` too: present only when
the body named a trace id (absent: none).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import orjson

from latscope.timeline.model import (
    Attempt,
    ConnectionInfo,
    ErrorKind,
    EventKind,
    EventLog,
    Phase,
    Read,
    RequestError,
    ServerMeasure,
    StreamEvent,
    TcpInfo,
    Timeline,
    Usage,
)
from latscope.timeline.redact import redact_headers, redact_url, scrub

SCHEMA = "latscope.timeline/2"
"""What :func:`timeline_to_dict` writes."""

READABLE_SCHEMAS = ("latscope.timeline/1", SCHEMA)
"""What :func:`timeline_from_dict` reads."""

_MARKS = tuple(f.name for f in fields(Timeline) if f.name.endswith("_ns"))
_SCALARS = (
    "method",
    "dialect",
    "model",
    "max_tokens",
    "stream",
    "request_body_bytes",
    "label",
    "trace_id",
    "span_id",
    "status",
    "response_body_bytes",
    "finish_reason",
    "output_text",
)


class TimelineFormatError(ValueError):
    """A serialised timeline could not be read; the message names the field."""


def _tcp_to_dict(info: TcpInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {f.name: getattr(info, f.name) for f in fields(TcpInfo)}


def _tcp_from_dict(data: dict[str, Any] | None) -> TcpInfo | None:
    return None if data is None else TcpInfo(**data)


def timeline_to_dict(t: Timeline) -> dict[str, Any]:
    """A JSON-ready dict of ``t`` (schema ``latscope.timeline/2``)."""
    out: dict[str, Any] = {"schema": SCHEMA, "url": redact_url(t.url)}
    for name in _SCALARS:
        out[name] = getattr(t, name)
    out["request_headers"] = redact_headers(t.request_headers)
    out["response_headers"] = redact_headers(t.response_headers)
    out["response_trailers"] = redact_headers(t.response_trailers)
    out["marks"] = {name: getattr(t, name) for name in _MARKS}
    if t.connection is not None:
        conn = {f.name: getattr(t.connection, f.name) for f in fields(ConnectionInfo)}
        conn["tcp_info_at_headers"] = _tcp_to_dict(t.connection.tcp_info_at_headers)
        conn["tcp_info_at_end"] = _tcp_to_dict(t.connection.tcp_info_at_end)
        out["connection"] = conn
    else:
        out["connection"] = None
    out["reads"] = [[r.at_ns, r.nbytes] for r in t.reads]
    if any(r.user_ns is not None for r in t.reads):
        out["read_user_ns"] = [r.user_ns for r in t.reads]
    out["events"] = [
        [e.at_ns, e.read_index, str(e.kind), e.text_chars, e.tokens, e.server_sent_ns, e.choice] for e in t.events
    ]
    out["usage"] = None if t.usage is None else {f.name: getattr(t.usage, f.name) for f in fields(Usage)}
    out["server"] = [{"name": m.name, "ms": m.ms, "source": m.source} for m in t.server]
    out["server_fields"] = t.server_fields
    if t.tokens_from_ids:
        out["tokens_from_ids"] = True
    out["error"] = _error_to_dict(t.error)
    out["warnings"] = [scrub(w) for w in t.warnings]
    out["stale_retry_error"] = _error_to_dict(t.stale_retry_error)
    out["idempotency_key"] = t.idempotency_key
    out["response_id"] = t.response_id
    if t.body_trace_ids:
        out["body_trace_ids"] = t.body_trace_ids
    out["retries"] = [_attempt_to_dict(a) for a in t.retries]
    return out


def _attempt_to_dict(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "started_ns": a.started_ns,
        "ended_ns": a.ended_ns,
        "status": a.status,
        "error": _error_to_dict(a.error),
        "tokens": a.tokens,
        "retry_after_ms": a.retry_after_ms,
        "should_retry": a.should_retry,
        "wait_ns": a.wait_ns,
        "response_id": a.response_id,
    }


def _attempt_from_dict(d: dict[str, Any]) -> Attempt:
    return Attempt(
        number=int(d["number"]),
        started_ns=int(d["started_ns"]),
        ended_ns=int(d["ended_ns"]),
        status=d.get("status"),
        error=_error_from_dict(d.get("error")),
        tokens=int(d.get("tokens") or 0),
        retry_after_ms=d.get("retry_after_ms"),
        should_retry=d.get("should_retry"),
        wait_ns=int(d.get("wait_ns") or 0),
        response_id=d.get("response_id"),
    )


def _error_to_dict(err: RequestError | None) -> dict[str, Any] | None:
    if err is None:
        return None
    return {
        "phase": str(err.phase),
        "kind": str(err.kind),
        "message": scrub(err.message),
        "at_ns": err.at_ns,
        "status": err.status,
    }


def _error_from_dict(err: dict[str, Any] | None) -> RequestError | None:
    if err is None:
        return None
    return RequestError(Phase(err["phase"]), ErrorKind(err["kind"]), err["message"], err["at_ns"], err.get("status"))


def timeline_from_dict(data: dict[str, Any]) -> Timeline:
    """Rebuild a :class:`Timeline` from :func:`timeline_to_dict` output; raises :class:`TimelineFormatError`."""
    schema = data.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise TimelineFormatError(f"schema: expected one of {', '.join(READABLE_SCHEMAS)}, got {schema!r}")
    try:
        t = Timeline(url=data["url"])
        for name in _SCALARS:
            setattr(t, name, data.get(name))
        t.method = data.get("method") or "POST"
        t.request_body_bytes = data.get("request_body_bytes") or 0
        t.response_body_bytes = data.get("response_body_bytes") or 0
        t.request_headers = dict(data.get("request_headers") or {})
        t.response_headers = dict(data.get("response_headers") or {})
        t.response_trailers = dict(data.get("response_trailers") or {})  # absent in records written before trailers
        for name, value in (data.get("marks") or {}).items():
            if name not in _MARKS:
                raise TimelineFormatError(f"marks.{name}: unknown mark")
            setattr(t, name, value)
        if t.started_ns is None:
            t.started_ns = 0
        conn = data.get("connection")
        if conn is not None:
            conn = dict(conn)
            conn["tcp_info_at_headers"] = _tcp_from_dict(conn.get("tcp_info_at_headers"))
            conn["tcp_info_at_end"] = _tcp_from_dict(conn.get("tcp_info_at_end"))
            t.connection = ConnectionInfo(**conn)
        reads = data.get("reads") or []
        user = data.get("read_user_ns") or [None] * len(reads)  # absent in records without kernel stamps
        if len(user) != len(reads):
            raise TimelineFormatError(f"read_user_ns: {len(user)} items for {len(reads)} reads")
        t.reads = [Read(int(a), int(n), None if u is None else int(u)) for (a, n), u in zip(reads, user, strict=True)]
        t.events = EventLog(_event_from_list(item, schema) for item in data.get("events") or [])
        usage = data.get("usage")
        t.usage = None if usage is None else Usage(**usage)
        t.server = [ServerMeasure(m["name"], float(m["ms"]), m["source"]) for m in data.get("server") or []]
        t.server_fields = dict(data.get("server_fields") or {})
        t.tokens_from_ids = data.get("tokens_from_ids") is True  # absent: counted one per text event
        t.error = _error_from_dict(data.get("error"))
        t.warnings = list(data.get("warnings") or [])
        t.stale_retry_error = _error_from_dict(data.get("stale_retry_error"))  # absent in older records
        t.idempotency_key = data.get("idempotency_key")  # absent in records written before retries
        t.response_id = data.get("response_id")  # absent in older records
        t.body_trace_ids = [str(i) for i in data.get("body_trace_ids") or []]  # absent: the body named none
        t.retries = [_attempt_from_dict(a) for a in data.get("retries") or []]
    except TimelineFormatError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise TimelineFormatError(f"malformed timeline: {exc!r}") from exc
    return t


def _event_from_list(item: list[Any], schema: str) -> StreamEvent:
    """One ``events`` item: six fields in schema 1, seven (the choice last) in schema 2."""
    if schema == SCHEMA:
        a, ri, k, c, tok, s, choice = item
    else:
        a, ri, k, c, tok, s = item
        choice = 0
    return StreamEvent(int(a), int(ri), EventKind(k), int(c), int(tok), None if s is None else int(s), int(choice))


def dumps(t: Timeline) -> bytes:
    """Serialise one timeline to JSON bytes."""
    return orjson.dumps(timeline_to_dict(t))


def loads(data: bytes | str) -> Timeline:
    """Parse JSON bytes produced by :func:`dumps`."""
    return timeline_from_dict(orjson.loads(data))
