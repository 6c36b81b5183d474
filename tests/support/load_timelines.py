"""Hand-built timelines for the load tests: exact marks, chosen gaps, coalesced reads, errors."""

from __future__ import annotations

from collections.abc import Iterable

from latscope.timeline.model import (
    ConnectionInfo,
    EventKind,
    Phase,
    Read,
    RequestError,
    StreamEvent,
    Timeline,
    Usage,
)

MS = 1_000_000


def make_timeline(
    *,
    start_ns: int = 10_000 * MS,
    ttft_ms: float = 50.0,
    gaps_ms: Iterable[float] = (10.0, 10.0, 10.0),
    coalesced: Iterable[int] = (),
    scheduled_ns: int | None = None,
    usage: Usage | None = None,
    reused: bool = False,
    connection_id: int = 1,
    server_delay_ms: float | None = None,
    error: tuple[Phase, str, int | None] | None = None,
) -> Timeline:
    """A streamed chat request: role chunk with the head, one content event per token (first after ``ttft_ms``,
    then ``gaps_ms`` apart), a finish chunk and ``[DONE]``.

    ``coalesced`` lists indexes of token events (0 = first token) that arrive in the same read as the previous
    event. ``server_delay_ms`` sets every event's server send stamp that much before its arrival.
    ``error = (phase, kind, status)`` makes the request fail at its end (tokens received so far are kept).
    """
    t = Timeline(url="http://127.0.0.1:1/v1/chat/completions", dialect="openai.chat", model="m")
    t.scheduled_ns = scheduled_ns
    t.started_ns = start_ns
    t.connect_start_ns = start_ns + MS // 10
    t.connect_end_ns = start_ns + MS // 5
    t.connection_ready_ns = start_ns + MS // 5
    t.send_start_ns = start_ns + MS // 4
    t.send_end_ns = start_ns + MS // 4 + 1000
    t.first_byte_ns = start_ns + 2 * MS
    t.headers_received_ns = t.first_byte_ns
    t.status = 200
    t.connection = ConnectionInfo(connection_id=connection_id, reused=reused, http_version="HTTP/1.1")
    if reused:
        t.connect_start_ns = t.connect_end_ns = None

    def add(kind: EventKind, at_ns: int, same_read: bool, tokens: int = 0) -> None:
        if not same_read or not t.reads:
            t.reads.append(Read(at_ns, 100))
        at = t.reads[-1].at_ns
        sent = None if server_delay_ms is None else at - int(server_delay_ms * MS)
        t.events.append(StreamEvent(at, len(t.reads) - 1, kind, tokens * 3, tokens, sent))

    add(EventKind.ROLE, t.first_byte_ns, False)
    coalesced_set = set(coalesced)
    at = start_ns + int(ttft_ms * MS)
    gaps = list(gaps_ms)
    for i in range(len(gaps) + 1):
        if i > 0:
            at += int(gaps[i - 1] * MS)
        add(EventKind.CONTENT, at, i in coalesced_set, tokens=1)
    token_times = [e.at_ns for e in t.events if e.kind is EventKind.CONTENT]
    t.first_token_ns, t.last_token_ns = token_times[0], token_times[-1]
    end = t.events[-1].at_ns + MS
    if error is not None:
        phase, kind, status = error
        t.error = RequestError(phase, kind, f"{kind} in {phase}", end, status)
        t.ended_ns = end
        if status is not None:
            t.status = status
        return t
    add(EventKind.FINISH, end, False)
    add(EventKind.DONE, end, True)
    t.finish_reason = "length"
    t.usage = usage
    t.ended_ns = end
    return t
