"""An incremental, sans-IO Server-Sent Events parser.

It follows the WHATWG HTML Standard, §9.2.6 "Interpreting an event stream"
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

* the stream is UTF-8; invalid sequences are replaced by U+FFFD (the spec's "UTF-8 decode"), and one leading BOM
  is stripped;
* a line ends with CRLF, LF or CR; a CR at the end of one :meth:`SSEParser.feed` followed by an LF at the start of
  the next is one line ending;
* a line starting with ``:`` is a comment; otherwise the field name runs up to the first ``:`` and one leading
  space of the value is removed; a line without ``:`` is a field with an empty value;
* ``data`` appends the value and an LF to the data buffer, ``event`` sets the event type buffer, ``id`` sets the
  last event ID buffer unless the value contains NUL, ``retry`` sets the reconnection time when the value is all
  ASCII digits; other field names are ignored;
* a blank line dispatches: with an empty data buffer nothing is dispatched (the event type buffer is still reset),
  otherwise the trailing LF is removed and an event is dispatched, its type defaulting to ``message``;
* at end of stream an incomplete event is discarded (:meth:`SSEParser.close` returns no event; it reports how many
  bytes were discarded so the caller can warn).

The parser never sees a socket: it is fed bytes and returns events (the h11 style). It runs for every event of every
stream a load generator reads, so the shape nearly every LLM server writes — ``data: {...}`` then a blank line, LF or
CRLF endings — has two fast paths: a read holding exactly one such event is recognised with two ``memchr`` scans,
and a run of such events in a large read is turned into events by C-level iteration (``split``, ``map``,
``accumulate``) with no Python bytecode per event. Anything else (comments, several fields per event, bare CRs,
mixed endings) takes the general line-by-line path. All paths give the same events for any split of the stream
into reads; the tests check that on generated streams.

UTF-8 is decoded per field value, after splitting on ASCII bytes. That equals decoding the whole stream first:
CR, LF, ``:`` and space are ASCII, so they never sit inside a multi-byte sequence, and a sequence cut short by one of
them is replaced the same way in both orders.
"""

from __future__ import annotations

from itertools import accumulate, compress, count, repeat
from operator import add, itemgetter, ne, not_
from typing import NamedTuple

_BOM = b"\xef\xbb\xbf"
_LF = 0x0A
_CR = 0x0D
_COLON = 0x3A
_DATA_PREFIX = b"data: "  # the line nearly every LLM server writes: one `data: ` line per event
_drop_cr = itemgetter(slice(0, -1))  # with CRLF endings a line split at LF still ends with its CR
_removeprefix = bytes.removeprefix
_new_event = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (about 2x cheaper per event)
_startswith = bytes.startswith
_decode_utf8 = bytes.decode


class SSEEvent(NamedTuple):
    """One dispatched event (WHATWG HTML §9.2.6, "dispatch the event").

    ``end_offset`` is a position in the raw stream (BOM included), for error messages such as
    "invalid JSON in the event ending at byte 1234". It is just past the first byte of the blank line's line ending:
    the LF of ``\\n\\n``, the CR of ``\\r\\n\\r\\n``. A CR alone ends a line, so the event is due there and does not
    wait for the LF that may follow in a later read; counting that LF would make the offset depend on how the
    stream was split into reads.
    """

    event: str  #: the event type: the last ``event`` field of the block, or ``"message"`` when none was given
    data: str  #: the ``data`` field values of the block joined with LF (no trailing LF)
    id: str | None  #: the last event ID at dispatch (it persists across events); None when no ``id`` field was seen
    retry: int | None  #: the reconnection time in milliseconds at dispatch (persists); None when no valid ``retry``
    end_offset: int  #: stream byte offset just past the byte that dispatched the event (see below)


class SSEParser:
    """Incremental parser: :meth:`feed` bytes as they arrive, :meth:`close` at end of stream.

    Attributes (read them any time; offsets are byte positions in the raw stream, BOM included):

    * ``invalid_utf8_offsets`` — the offset of every invalid UTF-8 sequence in a decoded field value (each was
      replaced by U+FFFD), in stream order;
    * ``comments`` — comment lines seen (servers send them as keep-alives);
    * ``events`` — events dispatched so far;
    * ``last_event_id`` — the last event ID buffer (None until an ``id`` field is seen);
    * ``retry_ms`` — the reconnection time in milliseconds set by the last valid ``retry`` field, or None;
    * ``bytes_fed`` — bytes received so far;
    * ``discarded_bytes`` — after :meth:`close`: how many bytes of an unfinished event the stream ended with (from
      its first field line, or its incomplete last line, to the end); 0 when it ended between events.
    """

    __slots__ = (
        "_bom_head",
        "_closed",
        "_cr_pending",
        "_data",
        "_pending_start",
        "_plain",
        "_tail",
        "_tail_offset",
        "_type",
        "bytes_fed",
        "comments",
        "discarded_bytes",
        "events",
        "invalid_utf8_offsets",
        "last_event_id",
        "retry_ms",
    )

    def __init__(self) -> None:
        self.invalid_utf8_offsets: list[int] = []
        self.comments = 0
        self.events = 0
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self.bytes_fed = 0
        self.discarded_bytes = 0
        self._bom_head: bytes | None = b""  # the first bytes while the BOM is undecided; None once decided
        self._tail: list[bytes] = []  # pieces of the incomplete last line, joined when its ending arrives
        self._tail_offset = 0  # stream offset of the first byte not yet consumed as a complete line
        self._cr_pending = False  # the last byte seen ended a line with CR: an LF right after belongs to it
        self._data: list[str] = []  # the data buffer, as its values (joined with LF at dispatch)
        self._type = ""  # the event type buffer
        self._pending_start: int | None = None  # offset of the first field line of the unfinished event
        self._plain = False  # between events with nothing pending: the single-event fast path applies
        self._closed = False

    @property
    def ended_mid_event(self) -> bool:
        """After :meth:`close`: True when the stream ended inside an event that was therefore discarded."""
        return self.discarded_bytes > 0

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume the next bytes of the stream; return the events they completed, in order (possibly none)."""
        size = len(data)
        if (
            self._plain
            and data.find(b"\n") == size - 2
            and data[-1] == _LF
            and data.startswith(_DATA_PREFIX)
            and _CR not in data  # an int operand makes `in` a bare memchr, about 10x faster than a bytes one
        ):
            # Exactly one `data: ...\n\n` event, read on its own: what a client sees when tokens arrive one by one.
            start = self._tail_offset
            end = start + size
            self._tail_offset = end
            self.bytes_fed += size
            self.events += 1
            try:
                value = data[6:-2].decode()
            except UnicodeDecodeError:
                value = self._decode(data[6:-2], start + 6)
            return [_new_event(SSEEvent, ("message", value, self.last_event_id, self.retry_ms, end))]
        if self._closed:
            raise RuntimeError("SSEParser.feed() called after close()")
        if not size:
            return []
        self.bytes_fed += size
        self._plain = False
        if self._bom_head is not None:
            # The BOM may arrive split over several reads: hold the first bytes until it is decided.
            head = self._bom_head + data
            if len(head) < 3 and _BOM.startswith(head):
                self._bom_head = head
                return []
            self._bom_head = None
            if head.startswith(_BOM):
                data = head[3:]
                self._tail_offset = 3
            else:
                data = head
            if not data:
                return []
        if self._cr_pending:
            self._cr_pending = False
            if data[0] == _LF:
                data = data[1:]
                self._tail_offset += 1
                if not data:
                    return []
        tail = self._tail
        if _LF not in data and _CR not in data:
            tail.append(data)  # no line ended: keep the pieces and join once (linear for long lines read slowly)
            return []
        if tail:
            tail.append(data)
            chunk = b"".join(tail)
            tail.clear()
        else:
            chunk = data
        out: list[SSEEvent] = []
        if _CR not in chunk:
            self._feed_split(chunk.split(b"\n"), False, out)
        elif chunk.count(b"\r\n") == chunk.count(b"\r") == chunk.count(b"\n"):
            self._feed_split(chunk.split(b"\n"), True, out)  # CRLF only (sse-starlette's default separator)
        else:
            self._feed_lines(chunk, out)
        self.events += len(out)
        self._plain = not (self._tail or self._data or self._type or self._cr_pending) and self._pending_start is None
        return out

    def close(self) -> list[SSEEvent]:
        """The stream ended. An unfinished event is discarded (spec); returns no event.

        ``discarded_bytes`` / ``ended_mid_event`` then say whether there was one, so the caller can warn.
        """
        if self._closed:
            return []
        self._closed = True
        self._plain = False
        tail = self._bom_head if self._bom_head is not None else b"".join(self._tail)
        self._tail.clear()
        start = self._pending_start
        # An incomplete last line is not a line (the spec's lines end with an end-of-line); it only counts as part of
        # an unfinished event, unless it is a comment.
        if start is None and tail and tail[0] != _COLON:
            start = self._tail_offset
        self.discarded_bytes = self.bytes_fed - start if start is not None else 0
        self._data = []
        self._type = ""
        self._pending_start = None
        return []

    # -- the paths ---------------------------------------------------------------------------------------------

    def _feed_split(self, lines: list[bytes], crlf: bool, out: list[SSEEvent]) -> None:
        """Parse a chunk split at LF whose line endings are all LF, or all CRLF (``crlf``: each line keeps its CR).

        ``lines[-1]`` is the incomplete last line (``b""`` when the chunk ends with a line ending).
        """
        pos = self._tail_offset
        last = len(lines) - 1
        i = 0
        # Lines that finish an event begun in an earlier read go through the general handling first.
        while i < last and (self._data or self._type):
            raw = lines[i]
            end = pos + len(raw) + 1
            line = raw[:-1] if crlf else raw
            if line:
                self._field(line, pos)
            else:
                self._dispatch(pos + 1, out)
            pos = end
            i += 1
        if i + 1 < last:
            i, pos = self._fast_run(lines, i, last, crlf, pos, out)
        while i < last:
            raw = lines[i]
            end = pos + len(raw) + 1
            line = raw[:-1] if crlf else raw
            if line:
                self._field(line, pos)
            else:
                self._dispatch(pos + 1, out)
            pos = end
            i += 1
        if lines[last]:
            self._tail.append(lines[last])
        self._tail_offset = pos

    def _fast_run(
        self, lines: list[bytes], i: int, last: int, crlf: bool, pos: int, out: list[SSEEvent]
    ) -> tuple[int, int]:
        """Turn the run of `data: ` line + blank line pairs starting at ``lines[i]`` into events, without Python
        bytecode per event. Returns the index of the first line after the run and its stream offset."""
        blank = b"\r" if crlf else b""
        pairs = (last - i) // 2
        stop = i + 2 * pairs
        data_lines = lines[i:stop:2]
        values = list(map(_removeprefix, data_lines, repeat(_DATA_PREFIX)))
        # A line without the prefix comes back whole: the total length tells whether every line had it.
        if (
            lines[i + 1 : stop : 2].count(blank) != pairs
            or sum(map(len, values)) != sum(map(len, data_lines)) - 6 * pairs
        ):
            stop = self._run_stop(lines, i, stop, blank)
            if stop <= i:
                return i, pos
            data_lines = lines[i:stop:2]
            values = list(map(_removeprefix, data_lines, repeat(_DATA_PREFIX)))
        # A data line (its CR kept, with CRLF endings) is followed by its LF and the blank line's first byte, which
        # dispatches; with CRLF endings the blank line's LF comes after that.
        step = 3 if crlf else 2
        ends = list(map(add, accumulate(map(len, data_lines)), count(pos + 2, step)))
        last_id = self.last_event_id
        retry = self.retry_ms
        first = len(out)
        try:
            text = map(_decode_utf8, map(_drop_cr, values) if crlf else values)
            out.extend(
                map(_new_event, repeat(SSEEvent), zip(repeat("message"), text, repeat(last_id), repeat(retry), ends))
            )
        except UnicodeDecodeError:
            # Decode again one by one, recording where each invalid sequence is.
            del out[first:]
            for value, end in zip(values, ends, strict=True):
                raw = value[:-1] if crlf else value
                text_one = self._decode(raw, end - 2 - len(value))
                out.append(_new_event(SSEEvent, ("message", text_one, last_id, retry, end)))
        self._pending_start = None
        return i + 2 * len(data_lines), ends[-1] + step - 2

    @staticmethod
    def _run_stop(lines: list[bytes], i: int, stop: int, blank: bytes) -> int:
        """Where the run of `data: ` + blank pairs from ``lines[i]`` ends (the index of its first bad data line)."""
        line_at = lines.__getitem__
        # Both scans are lazy: they stop at the first miss.
        data_ok = map(_startswith, map(line_at, range(i, stop, 2)), repeat(_DATA_PREFIX))
        blank_bad = map(ne, map(line_at, range(i + 1, stop, 2)), repeat(blank))
        bad_data = next(compress(count(i, 2), map(not_, data_ok)), stop)
        bad_blank = next(compress(count(i, 2), blank_bad), stop)
        return min(bad_data, bad_blank)

    def _feed_lines(self, chunk: bytes, out: list[SSEEvent]) -> None:
        """Parse ``chunk`` line by line, whatever its line endings (the general path)."""
        pos = self._tail_offset
        lines = chunk.splitlines(keepends=True)  # bytes.splitlines splits on exactly CRLF, LF and CR
        last = lines[-1]
        if last[-1] != _LF and last[-1] != _CR:
            self._tail.append(lines.pop())
        for raw in lines:
            end = pos + len(raw)
            line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            if line:
                self._field(line, pos)
            else:
                self._dispatch(pos + 1, out)
            pos = end
        # A trailing CR may be the first half of a CRLF split across reads: the next LF is then swallowed.
        self._cr_pending = not self._tail and last[-1] == _CR
        self._tail_offset = pos

    # -- the spec's steps --------------------------------------------------------------------------------------

    def _field(self, line: bytes, start: int) -> None:
        """Process one non-blank line that starts at stream offset ``start`` (spec: "process the field")."""
        if line[0] == _COLON:
            self.comments += 1
            return
        if self._pending_start is None:
            self._pending_start = start
        colon = line.find(b":")
        if colon < 0:
            name, raw = line, b""
            value_start = start + len(line)
        else:
            name = line[:colon]
            value_start = start + colon + 1
            raw = line[colon + 1 :]
            if raw[:1] == b" ":
                raw = raw[1:]
                value_start += 1
        if name == b"data":
            self._data.append(self._decode(raw, value_start))
        elif name == b"event":
            self._type = self._decode(raw, value_start)
        elif name == b"id":
            if 0 not in raw:  # an id with NUL is ignored (spec), so that it can always be sent back in a header
                self.last_event_id = self._decode(raw, value_start)
        elif name == b"retry" and raw.isdigit():  # bytes.isdigit is ASCII-only, as the spec asks; b"" is not
            self.retry_ms = int(raw)
        # Any other field name is ignored (spec).

    def _dispatch(self, end: int, out: list[SSEEvent]) -> None:
        """A blank line whose first line-ending byte ends at stream offset ``end`` (spec: "dispatch the event")."""
        self._pending_start = None
        if not self._data:
            self._type = ""
            return
        event = (self._type or "message", "\n".join(self._data), self.last_event_id, self.retry_ms, end)
        out.append(_new_event(SSEEvent, event))
        self._data = []
        self._type = ""

    def _decode(self, raw: bytes, start: int) -> str:
        """UTF-8 decode with replacement, recording the stream offset of every invalid sequence (``start`` is the
        offset of ``raw[0]``)."""
        try:
            return raw.decode()
        except UnicodeDecodeError:
            pass
        pieces: list[str] = []
        pos = 0
        while True:
            try:
                pieces.append(raw[pos:].decode())
                break
            except UnicodeDecodeError as exc:
                # exc.start..exc.end is exactly the span that errors="replace" turns into one U+FFFD.
                pieces.append(raw[pos : pos + exc.start].decode())
                pieces.append("\ufffd")
                self.invalid_utf8_offsets.append(start + pos + exc.start)
                pos += exc.end
        return "".join(pieces)
