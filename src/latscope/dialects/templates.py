"""Token-event templates with holes: decoding a run of token events by cutting strings, not parsing each event.

A stream's token events are written alike: the same fields in the same order, only the text changing — and, in some
dialects, a few fields the decoder does not read (OpenAI Responses' ``sequence_number``, TGI's token ``id``,
``logprob`` and ``index``, Ollama's ``created_at``, OpenAI's random ``obfuscation``). Learnt from one event, an
:class:`EventTemplate` is that event cut into constant pieces around its holes: the text (a JSON string value), and
the values of the ignored fields (numbers, or strings). An event fits when it is the pieces with, in between: in
the text and string holes, a string content with no ``"`` and no ``\\`` (stricter than JSON, which only sends more
events to the parser), the text not empty; in each number hole, exactly one JSON value with no comma in it (the
learnt event had a number there; the decoder reads none of it, so any number, ``true``, ``false``, ``null``, ``[]`` or
``{}`` will do).

Why that is exact: such an event lexes like the learnt one token by token but for the values in the holes (a string
with no quote and no escape ends at its closing quote; a hole holding one whole JSON value is one member's value,
as in the learnt event), so it is the same document but for those values. The decoder reads none of the ignored
fields (its own list says which), so the chunk is the learnt one with the text in the text hole, which the decoder
confirms once by decoding a probe document: the pieces with a stand-in text and other values in the other holes
(:meth:`EventTemplate.probe`).

A feed's events are checked together (:meth:`EventTemplate.texts`), by C-level loops only, no Python bytecode per
event:

1. each event without its first and last pieces, which the run must hold (one comparison of the run with them put
   back), the events joined with NUL. A string hole keeps its quotes throughout: they are cut off the pieces on
   either side of it, not off the hole;
2. each inner piece replaced by a mark of its own (:data:`_MARKS`: control characters, which no valid JSON text
   holds raw);
3. the marks, NULs, quotes and backslashes alone (every other byte deleted: one ``bytes.translate``) must be, once
   per event, the template's marks in order with each string hole's two quotes between them. So the run held no
   mark of its own, and replacing a piece by a mark can be undone: the run is the marked string with each mark put
   back as its piece. Each event is then its pieces with its holes between them, and no hole holds a quote or a
   backslash but a string hole's own two;
4. each mark and NUL made a comma (one more ``bytes.translate``), the run is the JSON array of every event's holes in
   turn, parsed once (its values only: no object is built): it must have as many elements as holes, a string in
   every text and string hole (a hole with no quote of its own between its two is one string token) and, in every
   number hole, a value that holds no comma (none can when the run holds no ``[`` and no ``{``; else ``sum`` takes
   numbers and booleans, and what it is spared, null, zeros and empty containers, holds no comma). A hole that held
   a comma, or a bracket that another closed, would have moved an element or made one a list of two or more, so
   each hole is exactly one JSON value of its kind, and the texts are the parser's own.

Whatever does not fit (a piece inside a text, an event of another shape, an escape, a control character) makes the
whole run fail, and the decoder parses it.

Where the package was built with a C compiler, ``latscope.dialects._templatefit`` fits the run first, one event at a
time in C: each event must be the pieces with, in the string holes, characters with no quote, backslash, control
character or lone surrogate (the text not empty) and, in each number hole, one JSON number and nothing around it.
That is stricter than the steps above (no other value in a number hole, no whitespace around it), so it accepts
nothing they refuse and gives the same texts; what it refuses goes through the steps above (see
:mod:`latscope.compiled`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import chain, compress, count, repeat
from operator import and_, contains, itemgetter, not_, or_

import orjson

from latscope import compiled

_SEP = "\x00"  # no valid JSON text holds a raw NUL (RFC 8259 §7: control characters are escaped in strings)
_SEP_BYTE = _SEP.encode()
_MARKS = "".join(map(chr, (*range(1, 9), *range(14, 32))))
"""The inner pieces' marks: control characters that no valid JSON text holds raw; JSON's whitespace (tab, LF, CR),
which a piece may hold, left out. A template has at most this many inner pieces."""

TEMPLATE_TRIES = 2
"""Templates a decoder tries at the start of a stream (each try costs one more parse). A stream whose events differ
in more than their text and the holes (OpenAI's random ``obfuscation`` field) defeats them and stops trying after
these."""

EVENTS_PER_TEMPLATE_TRY = 32
"""One more try is allowed for every this many events decoded without parsing JSON: llama.cpp's ``created`` changes
every second, so a stream it serves fast keeps earning new templates."""

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
_startswith = str.startswith
_endswith = str.endswith


def _compiled_fit() -> Callable[[list[str], tuple[str, ...], bytes, int], list[str] | None] | None:
    """The compiled fit (``_templatefit.texts``), or None where it was not built or is not :func:`compiled.allowed`."""
    if not compiled.allowed():
        return None
    try:
        from latscope.dialects._templatefit import texts
    except ImportError:
        return None
    return texts


_fit = _compiled_fit()


def slice_texts(values: list[str], prefix: str, suffix: str, start: int, stop: int) -> list[str] | None:
    """The text of each of ``values`` when every one is ``prefix`` + a text + ``suffix``, each text non-empty and
    needing no escaping in JSON (no ``"``, no ``\\``, printable); else None. The fit of a template whose only hole
    is the text (``start``, ``stop``: the text's slice), by C-level iteration only: no bytecode per event."""
    texts: list[str] = list(map(itemgetter(slice(start, stop)), values))
    if "" in texts:
        return None  # a value too short to hold the template, or an empty text (not a text chunk)
    # Every value is prefix + its text + suffix exactly when the concatenations agree: the texts were cut from the
    # values, so the two sides have their pieces at the same places (two joins and one compare, no call per value).
    if "".join(values) != prefix + (suffix + prefix).join(texts) + suffix:
        return None
    joined = "".join(texts)
    if '"' in joined or "\\" in joined or not joined.isprintable():
        return None
    return texts


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

    __slots__ = (
        "_commas",
        "_cuts",
        "_first",
        "_fit_kinds",
        "_fit_pieces",
        "_inner",
        "_joint",
        "_last",
        "_number_holes",
        "_order",
        "_others",
        "_string_holes",
        "holes",
        "pieces",
        "text_hole",
    )

    def __init__(self, pieces: list[str], text_hole: int, number_holes: list[int], string_holes: list[int]) -> None:
        self.pieces = pieces  #: the constant pieces, one more than the holes
        self.holes = len(pieces) - 1  #: how many holes
        self.text_hole = text_hole  #: which hole holds the text
        self._number_holes = number_holes
        self._string_holes = string_holes
        # what the compiled fit takes: the pieces as learnt, and each hole's kind (s: a string, n: a number)
        self._fit_pieces = tuple(pieces)
        self._fit_kinds = "".join("n" if i in number_holes else "s" for i in range(self.holes)).encode()
        # A string hole keeps its quotes: they are cut off the pieces on either side of it, so that the marked
        # run, its marks made commas, is the JSON array of the holes.
        quoted = [i == text_hole or i in string_holes for i in range(self.holes)]
        cut = list(pieces)
        for i in range(self.holes):
            if quoted[i]:  # between pieces[i], which ends with its opening quote, and pieces[i + 1]
                cut[i], cut[i + 1] = cut[i][:-1], cut[i + 1][1:]
        self._first, self._last = cut[0], cut[-1]
        self._inner = itemgetter(slice(len(cut[0]), -len(cut[-1]) or None))  # an event without those two
        self._joint = cut[-1] + cut[0]  # between two events once their first and last pieces are cut out
        marks = _MARKS[: self.holes - 1]
        # the inner pieces and their marks, longest first, so that a piece that holds another is cut before it
        self._cuts = sorted(zip(cut[1:-1], marks, strict=True), key=lambda pair: len(pair[0]), reverse=True)
        # What the marked run keeps of each event once every byte but the marks, the separator, quotes and
        # backslashes is deleted: its holes' quotes and the marks between them, in order, then the separator.
        order = "".join(('""' if quoted[i] else "") + (marks[i] if i < len(marks) else _SEP) for i in range(self.holes))
        self._order = order.encode()
        self._others = bytes(byte for byte in range(256) if byte not in b'"\\' + self._order)
        self._commas = bytes.maketrans((marks + _SEP).encode(), b"," * (len(marks) + 1))

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
        if len(pieces) - 2 > len(_MARKS):
            return None  # more inner pieces than marks
        holes = range(len(spans))
        number_holes = [i for i in holes if spans[i][2] == _NUMBER]
        string_holes = [i for i in holes if spans[i][2] == _STRING and i != text_hole]
        template = cls(pieces, text_hole, number_holes, string_holes)
        if "" in (piece for piece, _ in template._cuts):
            return None  # a piece that was only a string hole's quotes: no object's members
        return template

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

    def misfits(self, values: list[str]) -> list[int]:
        """The indexes of the ``values`` that cannot fit (without the first or the last piece, or with an escape),
        then ``len(values)``: the runs between them may fit."""
        first, last = self.pieces[0], self.pieces[-1]
        fits = map(and_, map(_startswith, values, repeat(first)), map(_endswith, values, repeat(last)))
        return [*compress(count(), map(or_, map(not_, fits), map(contains, values, repeat("\\")))), len(values)]

    def texts(self, values: list[str]) -> list[str] | None:
        """The text of each of ``values`` when every one fits the template, else None (the steps: see the module
        docstring)."""
        if _fit is not None:
            found = _fit(values, self._fit_pieces, self._fit_kinds, self.text_hole)
            if found is not None:
                return found
        first, last = self._first, self._last
        size = len(values)
        # 1. each event without its first and last pieces, which must be there
        inner = list(map(self._inner, values))
        if "".join(values) != first + self._joint.join(inner) + last:
            return None
        run = _SEP.join(inner)
        # 2. each inner piece marked
        for piece, mark in self._cuts:
            run = run.replace(piece, mark)
        # 3. the marks in the template's order, once per event, and no other quote nor any backslash
        encoded = run.encode("utf-8", "surrogatepass")
        if encoded.translate(None, self._others) + _SEP_BYTE != self._order * size:
            return None
        # 4. the holes as one JSON array: each one value of its kind
        try:
            holes_in_turn = _loads(b"[" + encoded.translate(self._commas) + b"]")
        except _JSONDecodeError:
            return None
        holes = self.holes
        if len(holes_in_turn) != holes * size:
            return None
        texts: list[str] = holes_in_turn[self.text_hole :: holes]
        if "[" not in run and "{" not in run:
            # No hole can hold a list or an object, so none swallowed another's comma: with as many elements as
            # holes, each is its hole's, and a quoted hole is a string.
            return None if "" in texts else texts
        try:
            if "" in texts or not "".join(texts):
                return None
            for i in self._string_holes:
                "".join(holes_in_turn[i::holes])
            for i in self._number_holes:
                # No list or object that holds a comma (any other value the decoder would not read either): sum
                # takes numbers and booleans, and what it is spared (null, zeros, empty containers) holds no comma.
                sum(filter(None, holes_in_turn[i::holes]))
        except TypeError:
            return None  # a hole of another kind: the run is not cut where it seems
        return texts
