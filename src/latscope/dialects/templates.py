"""Token-event templates with holes: decoding a stream's token events by cutting strings, without parsing JSON.

A stream's token events are written alike: the same fields in the same order, only the text changing — and, in some
dialects, a few fields the decoder does not read (OpenAI Responses' ``sequence_number``, TGI's token ``id``,
``logprob`` and ``index``, Ollama's ``created_at``, OpenAI's random ``obfuscation``). Learnt from one event, an
:class:`EventTemplate` is that event cut into constant pieces around its holes: the text (a JSON string value), and
the values of the ignored fields (numbers, or strings). An event fits when it is the pieces with, in between: in
the text and string holes, a string content needing no escaping (no ``"``, no ``\\``, printable: stricter than
JSON, which only sends more events to the parser), the text not empty; in each number hole, exactly one JSON value
(the learnt event had a number there; the decoder reads none of it, so any value will do).

Why that is exact: such an event lexes like the learnt one token by token but for the values in the holes (a string
with nothing to escape ends at its closing quote; a hole holding one whole JSON value is one member's value, as in
the learnt event), so it is the same document but for those values. The decoder reads none of the ignored fields
(its own list says which), so the chunk is the learnt one with the text in the text hole, which the decoder
confirms once by decoding a probe document: the pieces with a stand-in text and other values in the other holes
(:meth:`EventTemplate.probe`).

A feed's events are checked together (:meth:`EventTemplate.texts`): each without its first and last pieces, joined
with NUL (which no valid JSON document holds), cut with ``str.replace`` at the inner pieces and ``str.split``, the
holes checked in bulk (one scan for the text and string holes; the number holes parsed as one JSON array, no comma
in any of them, as many elements as holes), and the events rebuilt from the pieces and holes and compared with the
originals. C-level loops only, no Python bytecode per event; whatever does not rebuild exactly (a piece inside a
text, an event of another shape, a NUL) makes the whole run fail, and the decoder parses it.
"""

from __future__ import annotations

import re
from itertools import chain
from operator import itemgetter

import orjson

_SEP = "\x00"  # no valid JSON text holds a raw NUL (RFC 8259 §7: control characters are escaped in strings)

PROBE = "latscope-template-probe-7Qx"
"""The stand-in text of a probe document (printable, nothing to escape, unlikely in real data)."""

_LEXEME = re.compile(
    r'[ \t\n\r]*(?:("(?:[^"\\\x00-\x1f]|\\.)*")|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)'
    r"|([{}\[\],:]|true|false|null))"
)
"""One JSON token after optional whitespace (RFC 8259 §2, §6, §7): a string, a number, or punctuation / literal."""

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError

_STRING, _NUMBER, _OTHER = 1, 2, 3


def _lex(value: str) -> list[tuple[int, str, int, int]] | None:
    """The JSON tokens of ``value`` as ``(kind, token, start, end)``, or None when it does not lex (or ends with
    whitespace)."""
    tokens = []
    at, size = 0, len(value)
    match = _LEXEME.match
    while at < size:
        found = match(value, at)
        if found is None:
            return None
        group = found.lastindex or _OTHER
        tokens.append((group, found[group], found.start(group), found.end()))
        at = found.end()
    return tokens


class EventTemplate:
    """A token event's shape: constant ``pieces`` around ``len(pieces) - 1`` holes, one of them the text (see the
    module docstring). Built by :meth:`learn`."""

    __slots__ = ("_boundary", "_cuts", "_number_holes", "_string_holes", "holes", "pieces", "text_hole")

    def __init__(self, pieces: list[str], text_hole: int, number_holes: list[int], string_holes: list[int]) -> None:
        self.pieces = pieces  #: the constant pieces, one more than the holes
        self.holes = len(pieces) - 1  #: how many holes
        self.text_hole = text_hole  #: which hole holds the text
        self._number_holes = number_holes
        self._string_holes = string_holes
        # Where one event ends and the next begins in a NUL-joined run; then the inner pieces, longest first, so a
        # piece that holds another is cut before it.
        self._boundary = pieces[-1] + _SEP + pieces[0]
        self._cuts = sorted(pieces[1:-1], key=len, reverse=True)

    @classmethod
    def learn(
        cls, value: str, text: str, numbers: frozenset[str] = frozenset(), strings: frozenset[str] = frozenset()
    ) -> EventTemplate | None:
        """The template of ``value``, a JSON object whose decoded text is ``text``; ``numbers`` and ``strings`` name
        the fields, number- and string-valued, whose values the decoder does not read (holes too). None when the
        text does not stand in it exactly once as a string value that needs no escaping, or it does not lex."""
        if not text or '"' in text or "\\" in text or not text.isprintable() or PROBE in value or _SEP in value:
            return None
        tokens = _lex(value)
        if tokens is None:
            return None
        quoted = '"' + text + '"'
        spans: list[tuple[int, int, int]] = []  # (start, end, kind) of each hole, in order
        text_hole = -1
        for i, (kind, token, start, end) in enumerate(tokens):
            if i < 2 or tokens[i - 1][1] != ":" or tokens[i - 2][0] != _STRING:
                continue  # not an object member's value
            key = tokens[i - 2][1][1:-1]
            if kind == _NUMBER and key in numbers:
                spans.append((start, end, _NUMBER))
            elif kind == _STRING and token == quoted:
                if text_hole >= 0 or key in strings:
                    return None  # ambiguous
                text_hole = len(spans)
                spans.append((start + 1, end - 1, _STRING))
            elif kind == _STRING and key in strings and "\\" not in token:
                spans.append((start + 1, end - 1, _STRING))
        if text_hole < 0:
            return None
        pieces: list[str] = []
        at = 0
        for start, end, _ in spans:
            pieces.append(value[at:start])
            at = end
        pieces.append(value[at:])
        if "" in pieces[1:-1]:
            return None  # two holes side by side: not an object's members
        holes = range(len(spans))
        number_holes = [i for i in holes if spans[i][2] == _NUMBER]
        string_holes = [i for i in holes if spans[i][2] == _STRING and i != text_hole]
        return cls(pieces, text_hole, number_holes, string_holes)

    def probe(self) -> str:
        """The pieces with :data:`PROBE` in the text hole and, in the others, values other than any real stream's
        likely ones: decoded, it must give the learnt chunk with the probe as its text."""
        fills = [""] * self.holes
        for i in self._number_holes:
            fills[i] = "-12.5e3"
        for i in self._string_holes:
            fills[i] = "latscope-probe"
        fills[self.text_hole] = PROBE
        return "".join(chain.from_iterable(zip(self.pieces[:-1], fills, strict=True))) + self.pieces[-1]

    def texts(self, values: list[str]) -> list[str] | None:
        """The text of each of ``values`` when every one fits the template, else None."""
        pieces = self.pieces
        first, last = pieces[0], pieces[-1]
        # each event without its first and last pieces (checked below, with the rest), cut at the inner pieces
        inside = _SEP.join(map(itemgetter(slice(len(first), -len(last))), values))
        for piece in self._cuts:
            inside = inside.replace(piece, _SEP)
        holes = self.holes
        fields = inside.split(_SEP)
        if len(fields) != holes * len(values):
            return None
        texts = fields[self.text_hole :: holes]
        strings = "".join(texts)
        if self._string_holes:
            strings += "".join(chain.from_iterable(fields[i::holes] for i in self._string_holes))
        if "" in texts or '"' in strings or "\\" in strings or not strings.isprintable():
            return None
        if self._number_holes:
            # One JSON value per hole (a field the decoder does not read may hold any value; the learnt event had a
            # number there): parsed as one array, no comma inside a hole, as many elements as holes.
            numbers = list(chain.from_iterable(fields[i::holes] for i in self._number_holes))
            joined = ",".join(numbers)
            if joined.count(",") != len(numbers) - 1:
                return None
            try:
                if len(_loads("[" + joined + "]")) != len(numbers):
                    return None
            except _JSONDecodeError:
                return None
        # Rebuilt from the pieces and the holes, the run must be what arrived: then each event is exactly the pieces
        # with its holes in between, whatever the cuts above matched.
        woven: list[str] = [""] * (2 * len(fields))
        woven[::2] = fields
        woven[1::2] = [*pieces[1:-1], self._boundary] * len(values)
        woven[-1] = last
        rebuilt = "".join(woven)
        whole = _SEP.join(values)
        if len(whole) != len(first) + len(rebuilt) or not whole.startswith(first) or not whole.endswith(rebuilt):
            return None
        return texts
