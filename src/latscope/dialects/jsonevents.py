"""The event-stream decoder shared by the dialects whose every SSE event is one JSON object: Anthropic Messages,
OpenAI Responses and TGI's native ``/generate_stream``.

:class:`JsonEventDecoder` does what is the same for all of them — SSE framing (:mod:`latscope.sse`), JSON parsing,
invalid-UTF-8 and truncation warnings, numbering the event that failed, the chunks decoded before it — and asks its
subclass for one thing: the :class:`~latscope.dialects.base.Chunk` of one parsed object (:meth:`decode_object`).

Token events of one stream usually differ only in their text (Anthropic's ``text_delta`` events do), so once one
is decoded, its data is learnt as a template — the text between a fixed prefix and suffix — and the events that fit
it are decoded by comparing strings, without parsing JSON: the OpenAI decoder's technique (its ``_Template``
docstring says why it is exact), with the same proof: a probe text put in the text's place must decode to the same
chunk but for its text. Events that do not fit (a sequence number or a token id that changes) are parsed as usual.

A subclass's ``decode_object`` may raise :class:`UnknownShape` (or stumble with ``KeyError``, ``TypeError`` …) on an
object whose fields have unexpected types: the event becomes an OTHER chunk and a warning (once per stream), never a
crash. Invalid JSON is an :class:`~latscope.dialects.base.EventDecodeError` naming the event (1-based) and the byte
offset it ended at; a stream that outgrows its limits raises :class:`~latscope.sse.limits.StreamLimitError`.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any

import orjson

from latscope.dialects.base import Chunk, EventDecodeError, excerpt
from latscope.dialects.ssewarnings import closing_warnings, utf8_warnings
from latscope.sse.limits import DEFAULT_LIMITS, StreamLimits
from latscope.sse.parser import SSEParser
from latscope.timeline.model import EventKind

TEMPLATE_TRIES = 2
"""Templates tried at the start of a stream (each try costs a probe decode); one more for every
:data:`EVENTS_PER_TEMPLATE_TRY` events decoded without parsing JSON."""
EVENTS_PER_TEMPLATE_TRY = 32

_PROBE = "latscope-template-probe-7Qx"  # a stand-in text: printable, nothing to escape, unlikely in real data
_JSON_SPACE = " \t\n\r"
_new_chunk = tuple.__new__  # builds a Chunk without its Python-level __new__; every field is given, in order
_TOKEN_KINDS = frozenset({EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_CALL})
# zip arguments for the empty fields of a token chunk (finish, usage, timings, error, stamp, extra) and its choice 0
_SIX_EMPTY = (*(repeat(None),) * 6, repeat(0))

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_OTHER_CHUNK = Chunk(EventKind.OTHER)
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError)


class UnknownShape(Exception):
    """Raised by :meth:`JsonEventDecoder.decode_object` for an object it cannot read (the event becomes OTHER)."""


class JsonEventDecoder:
    """A :class:`~latscope.dialects.base.StreamDecoder` for event streams of JSON objects, one chunk per event.

    ``name`` prefixes its warnings (``"anthropic"``). Subclasses implement :meth:`decode_object` and say, through
    :attr:`ended`, whether the stream's terminal event arrived (else :meth:`close` warns that it did not, naming
    :attr:`terminal`).
    """

    name = "stream"
    terminal = "a terminal event"  #: what the stream should end with, for the close-time warning

    def __init__(self, *, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        self._sse = SSEParser(limits)
        self._warnings: list[str] = []
        self._utf8_seen = 0
        self._unknown_warned = False
        self._closed = False
        self.ended = False  #: set by the subclass when the stream's terminal event arrived
        #: ``(prefix, suffix, start, stop, kind)`` of the stream's token events, when learnt
        self._template: tuple[str, str, int, int, EventKind] | None = None
        self._template_builds = 0
        self._templated = 0  # events decoded by the template

    @property
    def warnings(self) -> list[str]:
        """Non-fatal oddities: invalid UTF-8, unknown shapes, no terminal event, a truncated last event."""
        return self._warnings

    @property
    def sse(self) -> SSEParser:
        """The underlying SSE parser (event and comment counts, byte offsets)."""
        return self._sse

    def decode_object(self, event_type: str, obj: dict[str, Any]) -> Chunk:
        """The chunk of one event: its SSE type (``"message"`` when it had none) and its data, a JSON object."""
        raise NotImplementedError

    def decode_text(self, event_type: str, data: str) -> Chunk | None:
        """The chunk of an event whose data is not JSON, or None to call it invalid (the default). A dialect whose
        ``error`` events may carry plain text overrides this."""
        return None

    def feed(self, data: bytes) -> list[Chunk]:
        """Consume the next body bytes; return one chunk per SSE event they completed."""
        sse = self._sse
        values = sse.feed_values(data)
        if len(sse.invalid_utf8_offsets) != self._utf8_seen:
            self._report_invalid_utf8()
        if values is None:
            events = sse.last_events()
            types = [event[0] for event in events]
            values = [event[1] for event in events]
        elif not values:
            return []
        else:
            types = None
        if self._template is not None and len(values) > 1:
            run = self._decode_run(values)
            if run is not None:
                return run
        out: list[Chunk] = []
        decode = self._decode
        try:
            for index, value in enumerate(values):
                out.append(decode("message" if types is None else types[index], value, index, len(values)))
        except EventDecodeError as exc:
            exc.chunks = out
            raise
        return out

    def close(self) -> list[Chunk]:
        """The body ended: add the end-of-stream warnings. Returns no chunk."""
        if self._closed:
            return []
        self._closed = True
        sse = self._sse
        sse.close()
        self._report_invalid_utf8()
        self._warnings.extend(closing_warnings(sse))
        if not self.ended:
            self._warnings.append(f"{self.name}: the stream ended without {self.terminal} after {sse.events} events")
        return []

    def _decode(self, event_type: str, value: str, index: int, batch_size: int) -> Chunk:
        template = self._template
        if template is not None and value.startswith(template[0]) and value.endswith(template[1]):
            text = value[template[2] : template[3]]
            if text and '"' not in text and "\\" not in text and text.isprintable():
                self._templated += 1
                return _new_chunk(Chunk, (template[4], text, 1, None, None, None, None, None, None, 0))
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
            # a token event the template (if any) did not fit: it goes, and another is learnt while the budget lasts
            self._template = None
            if self._template_builds < TEMPLATE_TRIES + self._templated // EVENTS_PER_TEMPLATE_TRY:
                self._learn_template(event_type, value, chunk)
        return chunk

    def _decode_run(self, values: list[str]) -> list[Chunk] | None:
        """The chunks of a feed's events when every one fits the template, or None. C-level iteration only: no
        bytecode per event (the OpenAI decoder's ``_decode_run``)."""
        assert self._template is not None
        prefix, suffix, start, stop, kind = self._template
        texts: list[str] = list(map(itemgetter(slice(start, stop)), values))
        if "" in texts or "".join(values) != prefix + (suffix + prefix).join(texts) + suffix:
            return None
        joined = "".join(texts)
        if '"' in joined or "\\" in joined or not joined.isprintable():
            return None
        self._templated += len(texts)
        fields = zip(repeat(kind), texts, repeat(1), *_SIX_EMPTY)
        return list(map(_new_chunk, repeat(Chunk), fields))

    def _learn_template(self, event_type: str, value: str, chunk: Chunk) -> None:
        """Make ``value`` (just decoded into ``chunk``, one token with nothing else) the template, when its text
        stands in it verbatim once, as a string value, and a probe in its place decodes to the same chunk."""
        self._template_builds += 1
        text = chunk[1]
        if not text or '"' in text or "\\" in text or not text.isprintable() or _PROBE in value:
            return
        quoted = '"' + text + '"'
        at = value.find(quoted)
        if at < 0 or value.find(quoted, at + 1) >= 0:
            return
        prefix = value[: at + 1]
        suffix = value[at + 1 + len(text) :]
        if suffix[1:].lstrip(_JSON_SPACE)[:1] == ":":
            return  # an object key, not a value
        try:
            probe = self.decode_object(event_type, _loads(prefix + _PROBE + suffix))
        except (_JSONDecodeError, UnknownShape, *_SHAPE_ERRORS):
            return
        if probe != (chunk[0], _PROBE, 1, None, None, None, None, None, None, 0):
            return
        self._template = (prefix, suffix, len(prefix), -len(suffix), chunk[0])

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

    def _report_invalid_utf8(self) -> None:
        self._warnings.extend(utf8_warnings(self._sse, self._utf8_seen))
        self._utf8_seen = len(self._sse.invalid_utf8_offsets)


def int_or_none(value: object) -> int | None:
    """``value`` when it is an integer (not a bool), else None."""
    return value if value.__class__ is int else None


def lab_stamp(obj: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    """The lab's ``latscope`` object of an event (``--truth``: its ``sent_ns`` send stamp, monotonic ns), as
    ``(server_sent_ns, extra)``; ``(None, None)`` when the event has none."""
    lab = obj.get("latscope")
    if lab.__class__ is not dict:
        return None, None
    return int_or_none(lab.get("sent_ns")), {"latscope": lab}
