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
CRLF endings — has fast paths: a read holding exactly one such event is recognised with two ``memchr`` scans; a read
made only of such events (plus the start of the next) is decoded once and cut into the events' data with one
``str.split``; a run of such events inside a read with other lines is turned into events by C-level iteration
(``split``, ``map``, ``accumulate``). None of them runs Python bytecode per event. Anything else (comments, several
fields per event, bare CRs, mixed endings) takes the general line-by-line path. All paths give the same events for
any split of the stream into reads; the tests check that on generated streams.

A consumer that needs only the data of ``message`` events (a dialect decoder) calls :meth:`SSEParser.feed_values`,
which returns those strings without building an :class:`SSEEvent` per event; the events of that feed, with their
offsets, can still be had afterwards (:meth:`SSEParser.last_events`, :meth:`SSEParser.last_end_offset`) for the rare
event the consumer cannot handle on its fast path.

UTF-8 is decoded per field value, after splitting on ASCII bytes. That equals decoding the whole stream first:
CR, LF, ``:`` and space are ASCII, so they never sit inside a multi-byte sequence, and a sequence cut short by one of
them is replaced the same way in both orders.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import accumulate, compress, count, repeat
from operator import add, itemgetter, ne, not_
from typing import Any, NamedTuple

from latscope.sse.limits import DEFAULT_LIMITS, StreamLimitError, StreamLimits

_BOM = b"\xef\xbb\xbf"
_LF = 0x0A
_CR = 0x0D
_COLON = 0x3A
_DATA_PREFIX = b"data: "  # the line nearly every LLM server writes: one `data: ` line per event
_EVENT_PREFIX = b"event: "  # the first line of a typed event (Anthropic, OpenAI Responses): `event: `, then `data: `
_OTHER_RUN_PREFIXES = (_EVENT_PREFIX, b"data:")  # runs of typed events, or of `data:` lines without the space (TGI)
_after_event = itemgetter(slice(7, None))  # an `event: ` line's value
_after_data = itemgetter(slice(6, None))  # a `data: ` line's value
_drop_cr = itemgetter(slice(0, -1))  # with CRLF endings a line split at LF still ends with its CR
_removeprefix = bytes.removeprefix
_new_event = tuple.__new__  # builds a NamedTuple without its Python-level __new__ (cheaper per event)
_startswith = bytes.startswith
_decode_utf8 = bytes.decode
_encode_utf8 = str.encode
_isascii = str.isascii
# A clean run of events, decoded: `data: v1<blank>data: v2<blank>...`, cut at each "<blank>data: " (LF / CRLF endings).
_RUN_SEPARATOR = ("\n\ndata: ", "\r\n\r\ndata: ")
_BLANK = (b"\n\n", b"\r\n\r\n")
_NOT_SINGLE = (False, None)  # _single_event's "not one event of those shapes"


def _other_run_at(chunk: bytes, at: int) -> bool:
    """True when a run of typed events, or of ``data:`` lines without the space, starts at ``chunk[at]`` (the
    ``data: `` run has its own path)."""
    return chunk.startswith(_OTHER_RUN_PREFIXES, at) and not chunk.startswith(_DATA_PREFIX, at)


class _Span(NamedTuple):
    """Events of one feed that are held as their data strings (a fast path made them): ``size`` of them from
    ``first`` in the feed's batch, with the same ``id`` / ``retry``, all of type ``message`` unless ``type_lines``
    holds their ``event: TYPE`` lines. Their end offsets are ``ends`` when known, else computed on demand from the
    values' UTF-8 lengths: each event is ``head`` bytes (``data: ``, or ``data:``, or its ``event:`` line, its LF
    and ``data: ``: 14 bytes and the type), the value and two line endings of ``eol`` bytes, the first event
    starting at stream offset ``start``."""

    first: int
    size: int
    start: int
    eol: int
    id: str | None
    retry: int | None
    ends: list[int] | None
    head: int
    type_lines: list[str] | None


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
        "_batch",
        "_bom_head",
        "_closed",
        "_cr_pending",
        "_data",
        "_data_bytes",
        "_general",
        "_pending_start",
        "_plain",
        "_single_end",
        "_spans",
        "_tail",
        "_tail_bytes",
        "_tail_offset",
        "_type",
        "_typed",
        "bytes_fed",
        "comments",
        "discarded_bytes",
        "events",
        "invalid_utf8_offsets",
        "last_event_id",
        "limits",
        "retry_ms",
    )

    def __init__(self, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.invalid_utf8_offsets: list[int] = []
        self.comments = 0
        self.events = 0
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None
        self.bytes_fed = 0
        self.discarded_bytes = 0
        self._bom_head: bytes | None = b""  # the first bytes while the BOM is undecided; None once decided
        self._tail: list[bytes] = []  # pieces of the incomplete last line, joined when its ending arrives
        self._tail_bytes = 0  # their total length (bounded by limits.max_line_bytes)
        self._tail_offset = 0  # stream offset of the first byte not yet consumed as a complete line
        self._cr_pending = False  # the last byte seen ended a line with CR: an LF right after belongs to it
        self._data: list[str] = []  # the data buffer, as its values (joined with LF at dispatch)
        self._data_bytes = 0  # the unfinished event's field lines as sent, bytes (bounded by limits.max_event_bytes)
        self._type = ""  # the event type buffer
        self._pending_start: int | None = None  # offset of the first field line of the unfinished event
        self._plain = False  # between events with nothing pending: the single-event fast path applies
        self._closed = False
        # What the last feed completed, in order: data strings (from the fast paths, which _spans or _single_end
        # describe) and SSEEvents (from the general path). Typed Any: it is both, and casts would cost a call each.
        self._batch: list[Any] = []
        self._single_end = -1  # the end offset when the last feed was one event alone (no span then)
        self._spans: list[_Span] = []
        self._general = False  # the batch holds SSEEvents
        self._typed = False  # ... and one of them is not of type `message`

    @property
    def ended_mid_event(self) -> bool:
        """After :meth:`close`: True when the stream ended inside an event that was therefore discarded."""
        return self.discarded_bytes > 0

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume the next bytes of the stream; return the events they completed, in order (possibly none)."""
        self.feed_values(data)
        return self.last_events()

    def feed_values(self, data: bytes) -> list[str] | None:
        """Consume the next bytes of the stream, for a consumer that needs only the data of ``message`` events.

        Returns the ``data`` of each event the bytes completed, in order, when every one of them has the type
        ``message``; None when one has another type (an ``event:`` field), and then :meth:`last_events` gives them
        all. The list belongs to the parser: read it, do not change it. The events' ``id`` / ``retry`` /
        ``end_offset`` are those :meth:`last_events` would give.
        """
        size = len(data)
        if (
            self._plain
            and data.find(b"\n") == size - 2
            and data[-1] == _LF
            and data.startswith(_DATA_PREFIX)
            and _CR not in data  # an int operand makes `in` a bare memchr, faster than a bytes one
        ):
            # Exactly one `data: ...\n\n` event, read on its own: what a client sees when tokens arrive one by one.
            # Nothing but the value and its end is kept: this runs once per read of every stream.
            start = self._tail_offset
            end = start + size
            self._tail_offset = end
            self.bytes_fed += size
            self.events += 1
            try:
                value = data[6:-2].decode()
            except UnicodeDecodeError:
                value = self._decode(data[6:-2], start + 6)
            batch = [value]
            self._batch = batch
            self._single_end = end
            return batch
        if self._plain and data[-2:] == b"\n\n" and _CR not in data:
            taken, single = self._single_event(data)
            if taken:
                return single
        if self._closed:
            raise RuntimeError("SSEParser.feed() called after close()")
        batch = []
        self._batch = batch
        self._single_end = -1
        self._spans.clear()
        self._general = self._typed = False
        if self._feed(data, batch):
            self.events += len(batch)
            self._plain = (
                not (self._tail or self._data or self._type or self._cr_pending) and self._pending_start is None
            )
        if self._typed:
            return None
        if not self._general:
            return batch
        return [item if item.__class__ is str else item[1] for item in batch]

    def _single_event(self, data: bytes) -> tuple[bool, list[str] | None]:
        """The other shapes of one event read on its own, between events, with LF endings: ``event: TYPE`` then
        ``data: VALUE`` (Anthropic's and OpenAI Responses' typed events), or ``data:VALUE`` without the space (TGI).
        Returns ``(True, what feed_values returns for it)``, or ``(False, None)`` when ``data`` is anything else (or
        not valid UTF-8: the general path records where)."""
        size = len(data)
        if data.startswith(b"event: "):
            first = data.find(b"\n")
            if not data.startswith(_DATA_PREFIX, first + 1) or data.find(b"\n", first + 1) != size - 2:
                return _NOT_SINGLE
            raw_type, raw_value = data[7:first], data[first + 7 : -2]
        elif data.startswith(b"data:") and data.find(b"\n") == size - 2:
            raw_type, raw_value = b"", data[5:-2]
            if raw_value[:1] == b" ":
                raw_value = raw_value[1:]
        else:
            return _NOT_SINGLE
        try:
            kind = raw_type.decode() or "message"
            value = raw_value.decode()
        except UnicodeDecodeError:
            return _NOT_SINGLE
        start = self._tail_offset
        end = start + size
        self._tail_offset = end
        self.bytes_fed += size
        self.events += 1
        self._spans.clear()
        if kind == "message":
            batch: list[Any] = [value]
            self._batch = batch
            self._single_end = end
            return True, batch
        self._batch = [_new_event(SSEEvent, (kind, value, self.last_event_id, self.retry_ms, end))]
        self._single_end = -1
        self._general = self._typed = True
        return True, None

    def last_values(self) -> list[str]:
        """The data of the events the last :meth:`feed_values` call completed, whatever their types (what
        :meth:`last_events` would give, without building the events). The list belongs to the parser."""
        batch = self._batch
        if self._single_end >= 0 or not self._general:
            return batch  # data strings only
        if not self._spans:
            return [item[1] for item in batch]  # SSEEvents only
        values = list(batch)
        for index in self._general_indexes():
            values[index] = batch[index][1]
        return values

    def last_types(self) -> list[str]:
        """The types of the events the last :meth:`feed_values` call completed (see :meth:`last_values`)."""
        batch = self._batch
        if self._single_end >= 0:
            return ["message"]
        if not self._spans:
            return [item[0] for item in batch] if self._general else ["message"] * len(batch)
        types = ["message"] * len(batch)
        for span in self._spans:
            if span.type_lines is not None:
                types[span.first : span.first + span.size] = map(_after_event, span.type_lines)
        if self._general:
            for index in self._general_indexes():
                types[index] = batch[index][0]
        return types

    def _general_indexes(self) -> Iterator[int]:
        """Where the last feed's SSEEvents are in its batch: around its spans (a fast path's events in one go)."""
        at = 0
        for span in self._spans:
            yield from range(at, span.first)
            at = span.first + span.size
        yield from range(at, len(self._batch))

    def last_events(self) -> list[SSEEvent]:
        """The events the last :meth:`feed` / :meth:`feed_values` call completed, as :class:`SSEEvent`."""
        batch = self._batch
        if self._single_end >= 0:
            return [_new_event(SSEEvent, ("message", batch[0], self.last_event_id, self.retry_ms, self._single_end))]
        if not self._spans:
            return batch  # general events only
        out = list(batch)
        for span in self._spans:
            first, n = span[0], span[1]
            ends = span.ends if span.ends is not None else self._span_ends(span)
            values = batch[first : first + n]
            lines = span.type_lines
            types = repeat("message") if lines is None else map(_after_event, lines)
            out[first : first + n] = map(
                _new_event, repeat(SSEEvent), zip(types, values, repeat(span.id), repeat(span.retry), ends)
            )
        return out

    def last_end_offset(self, index: int) -> int:
        """``end_offset`` of the ``index``-th event the last feed completed (what :meth:`last_events` would give),
        without building the events."""
        item = self._batch[index]
        if item.__class__ is not str:
            end: int = item.end_offset
            return end
        if self._single_end >= 0:
            return self._single_end
        for span in self._spans:
            if span.first <= index < span.first + span.size:
                ends = span.ends if span.ends is not None else self._span_ends(span)
                return ends[index - span.first]
        raise IndexError(index)  # unreachable: every string of the batch belongs to a span

    def _span_ends(self, span: _Span) -> list[int]:
        values: list[str] = self._batch[span.first : span.first + span.size]
        # The values were decoded strictly (a replaced sequence makes the path record `ends`), so re-encoding gives
        # the raw lengths back.
        lengths = map(len, values) if all(map(_isascii, values)) else map(len, map(_encode_utf8, values))
        lines = span.type_lines
        if lines is not None:  # each event's `event: ` line is 7 bytes and its type longer
            types = map(_after_event, lines)
            type_lengths = map(len, types) if all(map(_isascii, lines)) else map(len, map(_encode_utf8, types))
            lengths = map(add, lengths, type_lengths)
        per_event = span.head + 2 * span.eol  # the head, the line ending, the blank line
        # The end is just past the first byte of the blank line's ending (see SSEEvent).
        first_end = span.start + per_event - (span.eol - 1)
        return list(map(add, accumulate(lengths), count(first_end, per_event)))

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
        self._tail_bytes = 0
        start = self._pending_start
        # An incomplete last line is not a line (the spec's lines end with an end-of-line); it only counts as part of
        # an unfinished event, unless it is a comment.
        if start is None and tail and tail[0] != _COLON:
            start = self._tail_offset
        self.discarded_bytes = self.bytes_fed - start if start is not None else 0
        self._data = []
        self._data_bytes = 0
        self._type = ""
        self._pending_start = None
        return []

    # -- the paths ---------------------------------------------------------------------------------------------

    def _feed(self, data: bytes, batch: list[Any]) -> bool:
        """Consume ``data`` into ``batch``; False when the bytes only went to the buffers (no line ended)."""
        size = len(data)
        if not size:
            return False
        self.bytes_fed += size
        self._plain = False
        if self._bom_head is not None:
            # The BOM may arrive split over several reads: hold the first bytes until it is decided.
            head = self._bom_head + data
            if len(head) < 3 and _BOM.startswith(head):
                self._bom_head = head
                return False
            self._bom_head = None
            if head.startswith(_BOM):
                data = head[3:]
                self._tail_offset = 3
            else:
                data = head
            if not data:
                return False
        if self._cr_pending:
            self._cr_pending = False
            if data[0] == _LF:
                data = data[1:]
                self._tail_offset += 1
                if not data:
                    return True
        tail = self._tail
        if _LF not in data and _CR not in data:
            tail.append(data)  # no line ended: keep the pieces and join once (linear for long lines read slowly)
            self._tail_bytes += len(data)
            if self._tail_bytes > self.limits.max_line_bytes:
                self._line_too_long()
            return False
        if tail:
            tail.append(data)
            chunk = b"".join(tail)
            tail.clear()
            self._tail_bytes = 0
        else:
            chunk = data
        if _CR not in chunk:
            self._feed_chunk(chunk, False, batch)
        elif chunk.count(b"\r\n") == chunk.count(b"\r") == chunk.count(b"\n"):
            self._feed_chunk(chunk, True, batch)  # CRLF only (sse-starlette's default separator)
        else:
            self._feed_lines(chunk, batch)
        return True

    def _feed_chunk(self, chunk: bytes, crlf: bool, batch: list[Any]) -> None:
        """Parse a chunk (whole lines, then an incomplete last line) whose line endings are all LF or all CRLF.

        When no event is under way and the chunk starts with events that are each one ``data: `` line and a blank
        line, they are taken as a clean run: the run is decoded in one call and cut into the data values at every
        "blank line + ``data: ``" (one ``str.split``). A value holding another line ending means the run was not
        clean after all (a comment, a second field): the chunk then goes the line-by-line way.
        """
        blank = _BLANK[crlf]
        if not crlf and (self._type or self._data or _other_run_at(chunk, 0)):
            if self._type or self._data:
                # an event begun in the last read: end it the general way, then take the run that follows
                first = chunk.find(b"\n\n")
                if first >= 0 and _other_run_at(chunk, first + 2):
                    self._feed_split(chunk[: first + 2].split(b"\n"), False, batch)
                    chunk = chunk[first + 2 :]
            if not (self._type or self._data) and _other_run_at(chunk, 0):
                typed = chunk.startswith(_EVENT_PREFIX)
                end = self._typed_run(chunk, batch) if typed else self._tight_run(chunk, batch)
                if end == len(chunk):
                    return
                chunk = chunk[end:]
        if (
            not (self._data or self._type)
            and chunk.startswith(_DATA_PREFIX)
            # the first event is one line and a blank line: so, most likely, are the others (a stream whose events
            # have more lines would otherwise pay for the decoding and the split on every read, for nothing)
            and chunk.find(blank) == chunk.find(blank[: len(blank) // 2])
        ):
            end = chunk.rfind(blank)
            if end > 0:
                end += len(blank)
                region = chunk if end == len(chunk) else chunk[:end]
                try:
                    text = region.decode()
                except UnicodeDecodeError:
                    text = None  # the line-by-line way records where the invalid sequences are
                if text is not None:
                    values = text[6 : -len(blank)].split(_RUN_SEPARATOR[crlf])
                    # No line ending left inside a value: each is the whole of one `data: ` line. (`in` is a memchr;
                    # counting the LFs of the text instead looks at every character.)
                    if "\n" not in "".join(values):
                        self._take_run(batch, values, end, 2 if crlf else 1, 6, None)
                        if end == len(chunk):
                            return
                        chunk = chunk[end:]
        self._feed_split(chunk.split(b"\n"), crlf, batch)

    def _typed_run(self, chunk: bytes, batch: list[Any]) -> int:
        """Take the run of typed events at the start of ``chunk`` (LF endings, no event under way), each exactly
        ``event: TYPE`` + ``data: VALUE`` + a blank line, as Anthropic and OpenAI Responses write every event.

        The run up to the chunk's last blank line is decoded once and cut into lines; when they are ``event: `` line,
        ``data: `` line, blank line, over and over, the values are cut from them and kept with a span that holds the
        ``event:`` lines (C-level iteration, no bytecode per event). Returns how many bytes of ``chunk`` were taken:
        0 when the run is not that clean (or not valid UTF-8), and the chunk then goes the other ways.
        """
        found = self._run_text(chunk)
        if found is None:
            return 0
        end, text = found
        # Most often every event of the run has the same type (a run of token deltas): cut at each blank line and
        # the next event's two heads at once (one split on a separator that starts with the rare LF).
        cut = text.find("\ndata: ")
        if cut > 7 and text.find("\n") == cut:  # `event: ` and a type, one line, then its data line
            head = text[: cut + 7]
            values = text[len(head) : -2].split("\n\n" + head)
            # Without a line ending left in a value, the run is that head and one data line per event, over and
            # over (the split joined back is the text).
            if "\n" not in "".join(values):
                self._typed = self._typed or head != "event: message\ndata: "
                return self._take_run(batch, values, end, 1, 14, [head[:-7]] * len(values))
        # Each block is two lines, and a blank line follows it: every third line is the blank one.
        lines = text[:-2].split("\n")
        size = (len(lines) + 1) // 3
        type_lines, data_lines = lines[0::3], lines[1::3]
        if len(lines) != 3 * size - 1 or "".join(lines[2::3]):
            return 0
        # Each type line starts with its field (a stream has a few distinct ones), and so does each data line:
        # the lines are the values with the prefix put back.
        if not all([line.startswith("event: ") and line != "event: " for line in set(type_lines)]):
            return 0  # (`event: ` with no type is a `message` event: the general way says so)
        values = list(map(_after_data, data_lines))
        if "".join(data_lines) != "data: " + "data: ".join(values):
            return 0
        self._typed = self._typed or type_lines.count("event: message") != size
        return self._take_run(batch, values, end, 1, 14, type_lines)

    def _tight_run(self, chunk: bytes, batch: list[Any]) -> int:
        """Take the run of ``data:VALUE`` events (no space after the colon, as TGI writes them) at the start of
        ``chunk`` (LF endings, no event under way): cut at every blank line like the ``data: `` run, with their end
        offsets in a span. Returns how many bytes were taken (0 when the run is not that clean)."""
        found = None if chunk.startswith(_DATA_PREFIX) else self._run_text(chunk)
        if found is None:
            return 0
        end, text = found
        values = text[5:-2].split("\n\ndata:")
        # Another field, or a value whose leading space goes: only a value that sorts before "!" may start with a
        # space, and only then is the text searched for one.
        if "\n" in "".join(values) or (min(values) < "!" and "\n\ndata: " in text):
            return 0
        return self._take_run(batch, values, end, 1, 5, None)

    @staticmethod
    def _run_text(chunk: bytes) -> tuple[int, str] | None:
        """``(end, text)``: ``chunk`` up to the end of its last blank line (LF endings), ``end`` bytes, decoded;
        None when no blank line ends past its start, or those bytes are not valid UTF-8."""
        end = chunk.rfind(b"\n\n")
        if end <= 0:
            return None
        end += 2
        try:
            return end, (chunk if end == len(chunk) else chunk[:end]).decode()
        except UnicodeDecodeError:
            return None

    def _take_run(
        self, batch: list[Any], values: list[str], end: int, eol: int, head: int, type_lines: list[str] | None
    ) -> int:
        """Keep ``values``, the data of a clean run of events that fills the chunk's first ``end`` bytes, in
        ``batch`` with a span that describes them (``eol``, ``head``, ``type_lines``: see :class:`_Span`); returns
        ``end``."""
        pos = self._tail_offset
        span = (len(batch), len(values), pos, eol, self.last_event_id, self.retry_ms, None, head, type_lines)
        self._spans.append(_new_event(_Span, span))
        batch.extend(values)
        self._tail_offset = pos + end
        self._pending_start = None
        return end

    def _feed_split(self, lines: list[bytes], crlf: bool, out: list[Any]) -> None:
        """Parse a chunk split at LF whose line endings are all LF, or all CRLF (``crlf``: each line keeps its CR).

        ``lines[-1]`` is the incomplete last line (``b""`` when the chunk ends with a line ending).
        """
        last = len(lines) - 1
        # Lines that finish an event begun in an earlier read go through the general handling first.
        i, pos = self._lines(lines, 0, last, crlf, self._tail_offset, out, until_idle=True)
        if i + 1 < last:
            i, pos = self._fast_run(lines, i, last, crlf, pos, out)
        i, pos = self._lines(lines, i, last, crlf, pos, out, until_idle=False)
        if lines[last]:
            self._hold(lines[last])
        self._tail_offset = pos

    def _lines(
        self, lines: list[bytes], i: int, last: int, crlf: bool, pos: int, out: list[Any], *, until_idle: bool
    ) -> tuple[int, int]:
        """The general handling of ``lines[i:last]``, line by line; with ``until_idle``, only until no event is under
        way. Returns the next line's index and offset."""
        while i < last and not (until_idle and not (self._data or self._type)):
            raw = lines[i]
            end = pos + len(raw) + 1
            line = raw[:-1] if crlf else raw
            if line:
                self._field(line, pos)
            else:
                self._dispatch(pos + 1, out)
            pos = end
            i += 1
        return i, pos

    def _fast_run(self, lines: list[bytes], i: int, last: int, crlf: bool, pos: int, out: list[Any]) -> tuple[int, int]:
        """Turn the run of `data: ` line + blank line pairs starting at ``lines[i]`` into events (their data values,
        and a span that describes them), without Python bytecode per event. Returns the index of the first line after
        the run and its stream offset."""
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
        first = len(out)
        try:
            out.extend(map(_decode_utf8, map(_drop_cr, values) if crlf else values))
        except UnicodeDecodeError:
            # Decode again one by one, recording where each invalid sequence is.
            del out[first:]
            for value, end in zip(values, ends, strict=True):
                raw = value[:-1] if crlf else value
                out.append(self._decode(raw, end - 2 - len(value)))
        span = (first, len(values), pos, 2 if crlf else 1, self.last_event_id, self.retry_ms, ends, 6, None)
        self._spans.append(_new_event(_Span, span))
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

    def _feed_lines(self, chunk: bytes, out: list[Any]) -> None:
        """Parse ``chunk`` line by line, whatever its line endings (the general path)."""
        pos = self._tail_offset
        lines = chunk.splitlines(keepends=True)  # bytes.splitlines splits on exactly CRLF, LF and CR
        last = lines[-1]
        if last[-1] != _LF and last[-1] != _CR:
            self._hold(lines.pop())
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

    def _hold(self, piece: bytes) -> None:
        """Keep ``piece``, the start of a line whose end has not arrived (the tail is empty here)."""
        self._tail.append(piece)
        self._tail_bytes = len(piece)
        if self._tail_bytes > self.limits.max_line_bytes:
            self._line_too_long()

    def _line_too_long(self) -> None:
        limit = self.limits.max_line_bytes
        raise StreamLimitError(
            f"an event-stream line grew past {limit} bytes without ending (the line limit; it starts at byte "
            f"{self._tail_offset} of the stream)",
            "max_line_bytes",
        )

    # -- the spec's steps --------------------------------------------------------------------------------------

    def _field(self, line: bytes, start: int) -> None:
        """Process one non-blank line that starts at stream offset ``start`` (spec: "process the field")."""
        if line[0] == _COLON:
            self.comments += 1
            return
        if self._pending_start is None:
            self._pending_start = start
        # the event's size as sent, every field line and its ending: what holding it costs (a short `data:` line
        # becomes a list entry and a string)
        self._data_bytes += len(line) + 1
        if self._data_bytes > self.limits.max_event_bytes:
            raise StreamLimitError(
                f"an event grew past {self.limits.max_event_bytes} bytes over {len(self._data) + 1} field lines "
                f"without ending (the event limit; it starts at byte {self._pending_start} of the stream)",
                "max_event_bytes",
            )
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

    def _dispatch(self, end: int, out: list[Any]) -> None:
        """A blank line whose first line-ending byte ends at stream offset ``end`` (spec: "dispatch the event")."""
        self._pending_start = None
        self._data_bytes = 0
        if not self._data:
            self._type = ""
            return
        kind = self._type or "message"
        out.append(_new_event(SSEEvent, (kind, "\n".join(self._data), self.last_event_id, self.retry_ms, end)))
        self._general = True
        if kind != "message":
            self._typed = True
        self._data = []
        self._data_bytes = 0
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
