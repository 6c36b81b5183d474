"""The event-stream decoder shared by the dialects whose every SSE event is one JSON object: Anthropic Messages,
OpenAI Responses and TGI's native ``/generate_stream``.

:class:`JsonEventDecoder` does what is the same for all of them — SSE framing (:mod:`latscope.sse`), JSON parsing,
invalid-UTF-8 and truncation warnings, numbering the event that failed, the chunks decoded before it — and asks its
subclass for one thing: the :class:`~latscope.dialects.base.Chunk` of one parsed object (:meth:`decode_object`).

Token events of one stream usually differ only in their text (Anthropic's ``text_delta`` events do) and in fields
the decoder does not read (a sequence number, a token id: the subclass names them in :attr:`template_numbers` and
:attr:`template_strings`), so once one is decoded, its data is learnt as a template
(:class:`~latscope.dialects.templates.EventTemplate`: constant pieces around the text and those fields' values) and
the events that fit it are decoded by cutting strings, without parsing each event (a run's holes alone are parsed,
as one JSON array); a probe put in the text's place must
decode to the same chunk but for its text. A template whose only hole is the text also decodes an event read alone
(a prefix and suffix compared: the OpenAI decoder's ``_Template``); one with more holes decodes runs of events, and
an event read alone is parsed. Events that do not fit are parsed as usual.

A subclass's ``decode_object`` may raise :class:`UnknownShape` (or stumble with ``KeyError``, ``TypeError`` …) on an
object whose fields have unexpected types: the event becomes an OTHER chunk and a warning (once per stream), never a
crash. Invalid JSON is an :class:`~latscope.dialects.base.EventDecodeError` naming the event (1-based) and the byte
offset it ended at; a stream that outgrows its limits raises :class:`~latscope.sse.limits.StreamLimitError`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from latscope.dialects.base import Chunk, EventDecodeError, TextRun, excerpt
from latscope.dialects.ssedecoder import SSEStreamDecoder
from latscope.dialects.templates import EVENTS_PER_TEMPLATE_TRY, PROBE, TEMPLATE_TRIES, EventTemplate, slice_texts
from latscope.dialects.usage import int_or_none
from latscope.sse.limits import DEFAULT_LIMITS, StreamLimits
from latscope.timeline.model import EventKind

_new_chunk = tuple.__new__  # builds a Chunk without its Python-level __new__; every field is given, in order
_TOKEN_KINDS = frozenset({EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL})

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_OTHER_CHUNK = Chunk(EventKind.OTHER)
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


class UnknownShape(Exception):
    """Raised by :meth:`JsonEventDecoder.decode_object` for an object it cannot read (the event becomes OTHER)."""


class JsonEventDecoder(SSEStreamDecoder):
    """A :class:`~latscope.dialects.base.StreamDecoder` for event streams of JSON objects, one chunk per event.

    ``name`` prefixes its warnings (``"anthropic"``). Subclasses implement :meth:`decode_object` and say, through
    :attr:`ended`, whether the stream's terminal event arrived (else :meth:`close` warns that it did not, naming
    :attr:`terminal`).
    """

    name = "stream"
    terminal = "a terminal event"  #: what the stream should end with, for the close-time warning
    #: number- and string-valued fields of token events that :meth:`decode_object` never reads (template holes)
    template_numbers: ClassVar[frozenset[str]] = frozenset()
    template_strings: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits=limits)
        self._unknown_warned = False
        self.ended = False  #: set by the subclass when the stream's terminal event arrived
        #: the stream's token events' template and their kind, when learnt
        self._template: EventTemplate | None = None
        self._kind = EventKind.CONTENT
        # with a template whose only hole is the text: (prefix, suffix, start, stop) to decode one event by slicing
        self._slice: tuple[str, str, int, int] | None = None
        self._template_builds = 0
        self._templated = 0  # events decoded by the template
        self._typed_feed = False  # the current feed's events are not all of type `message`
        self._types: list[str] | None = None  # ... and their types, once asked for

    def decode_object(self, event_type: str, obj: dict[str, Any]) -> Chunk:
        """The chunk of one event: its SSE type (``"message"`` when it had none) and its data, a JSON object."""
        raise NotImplementedError

    def decode_text(self, event_type: str, data: str) -> Chunk | None:
        """The chunk of an event whose data is not JSON, or None to call it invalid (the default). A dialect whose
        ``error`` events may carry plain text overrides this."""
        return None

    def feed(self, data: bytes) -> list[Chunk] | TextRun:
        """Consume the next body bytes; return one chunk per SSE event they completed."""
        sse = self._sse
        values = sse.feed_values(data)
        if len(sse.invalid_utf8_offsets) != self._utf8_seen:
            self._report_invalid_utf8()
        if values is None:
            values = sse.last_values()  # events of other types among them
            if len(values) == 1:
                return self._decode_one(sse.last_types()[0], values[0])
            self._typed_feed = True
        elif len(values) == 1:
            return self._decode_one("message", values[0])  # the common case when tokens arrive one per read
        elif not values:
            return []
        else:
            self._typed_feed = False
        self._types = None  # the types of this feed's events, asked for when an event is decoded on its own
        out: list[Chunk] = []
        if self._template is None:
            return self._decode_each(values, 0, len(values), out)
        # A token event's chunk is read from its data (its "type" field wins over the SSE type).
        run = self._decode_run(values)
        if run is not None:
            return run
        if self._slice is not None:
            return self._decode_each(values, 0, len(values), out)  # each event is cut on its own
        # Some events do not fit: the template's runs between those that cannot (an escape in them, another
        # shape), the others one by one.
        at = 0
        for misfit in self._template.misfits(values):
            run = self._decode_run(values[at:misfit]) if misfit - at > 1 and self._template is not None else None
            if run is not None:
                out += run
            else:
                self._decode_each(values, at, misfit, out)
            if misfit < len(values):
                self._decode_each(values, misfit, misfit + 1, out)
            at = misfit + 1
        return out

    def _decode_one(self, event_type: str, value: str) -> list[Chunk]:
        """The chunk of a feed's only event, in a list."""
        try:
            return [self._decode(event_type, value, 0, 1)]
        except EventDecodeError as exc:
            exc.chunks = []
            raise

    def _decode_each(self, values: list[str], start: int, stop: int, out: list[Chunk]) -> list[Chunk]:
        """Append the chunks of this feed's ``values[start:stop]`` to ``out``, one event at a time; an event that
        fails carries ``out`` (the feed's chunks before it) in its error."""
        types = self._types
        if types is None and self._typed_feed:
            types = self._types = self._sse.last_types()
        decode = self._decode
        size = len(values)
        try:
            for index in range(start, stop):
                out.append(decode("message" if types is None else types[index], values[index], index, size))
        except EventDecodeError as exc:
            exc.chunks = out
            raise
        return out

    def missing_end(self) -> str | None:
        if self.ended:
            return None
        return f"{self.name}: the stream ended without {self.terminal} after {self._sse.events} events"

    def _decode(self, event_type: str, value: str, index: int, batch_size: int) -> Chunk:
        cut = self._slice
        if cut is not None and value.startswith(cut[0]) and value.endswith(cut[1]):
            text = value[cut[2] : cut[3]]
            if text and '"' not in text and "\\" not in text and text.isprintable():
                self._templated += 1
                return _new_chunk(Chunk, (self._kind, text, 1, None, None, None, None, None, None, 0))
        try:
            obj = _loads(value)
        except _JSONDecodeError as exc:
            chunk = self.decode_text(event_type, value)
            if chunk is not None:
                return chunk
            if not value.strip():
                return self._unknown(value, index, batch_size)
            number = self._sse.events - batch_size + index + 1
            raise EventDecodeError(
                f"invalid JSON in SSE event {number} (ending at stream byte {self._sse.last_end_offset(index)}): "
                f"{exc}; data: {excerpt(value)}"
            ) from None
        if obj.__class__ is not dict:
            return self._unknown(value, index, batch_size)
        try:
            chunk = self.decode_object(event_type, obj)
        except (UnknownShape, *_SHAPE_ERRORS):
            return self._unknown(value, index, batch_size)
        if chunk[0] in _TOKEN_KINDS and chunk[3:] == (None, None, None, None, None, None, 0):
            template = self._template
            if (
                template is not None
                and self._slice is None
                and value.startswith(template.pieces[0])
                and value.endswith(template.pieces[-1])
            ):
                return chunk  # it likely fits (read alone, it was parsed: cutting one event costs more); it stays
            # a token event the template (if any) did not fit: it goes, and another is learnt while the budget lasts
            self._template = self._slice = None
            if self._template_builds < TEMPLATE_TRIES + self._templated // EVENTS_PER_TEMPLATE_TRY:
                self._learn_template(event_type, value, chunk)
        return chunk

    def _decode_run(self, values: list[str]) -> TextRun | None:
        """The chunks of a feed's events when every one fits the template, or None. C-level iteration only: no
        bytecode per event (the OpenAI decoder's ``_decode_run``)."""
        assert self._template is not None
        cut = self._slice
        if cut is None:
            texts = self._template.texts(values)
            if texts is None:
                return None
        else:
            texts = slice_texts(values, *cut)
            if texts is None:
                return None
        self._templated += len(texts)
        return TextRun(self._kind, texts)

    def _learn_template(self, event_type: str, value: str, chunk: Chunk) -> None:
        """Make ``value`` (just decoded into ``chunk``, one token with nothing else) the template, when its text
        stands in it verbatim once, as a string value, and a probe in its place decodes to the same chunk."""
        self._template_builds += 1
        template = EventTemplate.learn(value, chunk[1], self.template_numbers, self.template_strings)
        if template is None:
            return
        try:
            probe = self.decode_object(event_type, _loads(template.probe()))
        except (_JSONDecodeError, UnknownShape, *_SHAPE_ERRORS):
            return
        if probe != (chunk[0], PROBE, 1, None, None, None, None, None, None, 0):
            return
        self._template, self._kind = template, chunk[0]
        if template.holes == 1:
            prefix, suffix = template.pieces
            self._slice = (prefix, suffix, len(prefix), -len(suffix))

    def _unknown(self, value: str, index: int, batch_size: int) -> Chunk:
        """An event this decoder cannot read: OTHER, and a warning the first time."""
        if not self._unknown_warned:
            self._unknown_warned = True
            number = self._sse.events - batch_size + index + 1
            self._warnings.append(
                f"{self.name}: unrecognised event shape (first: SSE event {number}, ending at stream byte "
                f"{self._sse.last_end_offset(index)}): {excerpt(value)}"
            )
        return _OTHER_CHUNK


def token_chunk(kind: EventKind, text: Any, obj: dict[str, Any]) -> Chunk:
    """The chunk of a token event: its delta ``text`` as one token of ``kind``, with the lab's stamp when ``obj``
    carries one; OTHER for an empty text (no token). Raises :class:`UnknownShape` when ``text`` is not a string."""
    if text.__class__ is not str:
        raise UnknownShape("delta text")
    if not text:
        return _OTHER_CHUNK
    if obj.get("latscope") is None:
        return _new_chunk(Chunk, (kind, text, 1, None, None, None, None, None, None, 0))
    sent_ns, extra = lab_stamp(obj)
    return _new_chunk(Chunk, (kind, text, 1, None, None, None, None, sent_ns, extra, 0))


def lab_stamp(obj: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    """The lab's ``latscope`` object of an event (``--truth``: its ``sent_ns`` send stamp, monotonic ns), as
    ``(server_sent_ns, extra)``; ``(None, None)`` when the event has none."""
    lab = obj.get("latscope")
    if lab.__class__ is not dict:
        return None, None
    return int_or_none(lab.get("sent_ns")), {"latscope": lab}
