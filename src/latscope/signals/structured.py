"""A small, strict parser and serialiser for RFC 8941 Structured Field Values (the subset rate-limit headers use).

Supported: Lists, Dictionaries and Items; bare items Integer, Decimal, String, Token, Byte Sequence and Boolean;
Parameters; Inner Lists (parsed so that they can be skipped by callers that expect Items). Not supported: the Date
and Display String types that RFC 9651 added; a field using them fails to parse.

Parsing follows RFC 8941 §4.2 to the letter, including its failure rule: "if parsing fails … the entire field value
MUST be ignored" (§4.2), so every ``parse_*`` function either returns the whole value or raises
:class:`StructuredFieldError`. Several field lines of one field are combined with ``", "`` before parsing (§4.2).
"""

from __future__ import annotations

import base64
import binascii
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias


class StructuredFieldError(ValueError):
    """The field value is not a valid Structured Field of the expected type; the message names the offset."""


class Token(str):
    """An sf-token (§3.3.4): kept apart from sf-string, which is a plain ``str``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Token({str(self)!r})"


BareItem: TypeAlias = int | float | str | bytes | bool
"""Integer → int, Decimal → float, String → str, Token → :class:`Token`, Byte Sequence → bytes, Boolean → bool."""


@dataclass(frozen=True, slots=True)
class Item:
    """An sf-item: a bare item with parameters (§3.3)."""

    value: BareItem
    params: Mapping[str, BareItem] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InnerList:
    """An sf-inner-list: items in parentheses, with parameters of its own (§3.1.1)."""

    items: tuple[Item, ...]
    params: Mapping[str, BareItem] = field(default_factory=dict)


Member: TypeAlias = Item | InnerList

_LCALPHA = frozenset(string.ascii_lowercase)
_DIGITS = frozenset(string.digits)
_KEY_CHARS = _LCALPHA | _DIGITS | frozenset("_-.*")
_TCHARS = frozenset("!#$%&'*+-.^_`|~") | _DIGITS | frozenset(string.ascii_letters)
_TOKEN_CHARS = _TCHARS | frozenset(":/")
_BASE64_CHARS = frozenset(string.ascii_letters + string.digits + "+/=")
_MAX_INTEGER = 999_999_999_999_999


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> StructuredFieldError:
        return StructuredFieldError(f"{why} at offset {self.pos} in {self.text!r}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip(self, chars: str) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1

    # §4.2.1
    def list_(self) -> list[Member]:
        members: list[Member] = []
        while not self.at_end():
            members.append(self.item_or_inner_list())
            if self.end_of_members("list"):
                return members
        return members

    # §4.2.2
    def dictionary(self) -> dict[str, Member]:
        members: dict[str, Member] = {}
        while not self.at_end():
            key = self.key()
            if self.peek() == "=":
                self.pos += 1
                members[key] = self.item_or_inner_list()
            else:
                members[key] = Item(True, self.parameters())
            if self.end_of_members("dictionary"):
                return members
        return members

    def end_of_members(self, what: str) -> bool:
        """After a member of a list or dictionary (``what``): True at the end of the field, else False past the
        ``,`` between members and the whitespace around it (§4.2.1, §4.2.2)."""
        self.skip(" \t")
        if self.at_end():
            return True
        if self.peek() != ",":
            raise self.fail(f"expected ',' between {what} members")
        self.pos += 1
        self.skip(" \t")
        if self.at_end():
            raise self.fail(f"trailing ',' in {what}")
        return False

    def item_or_inner_list(self) -> Member:
        if self.peek() == "(":
            return self.inner_list()
        return self.item()

    # §4.2.1.2
    def inner_list(self) -> InnerList:
        self.pos += 1
        items: list[Item] = []
        while not self.at_end():
            self.skip(" ")
            if self.peek() == ")":
                self.pos += 1
                return InnerList(tuple(items), self.parameters())
            items.append(self.item())
            if self.peek() not in (" ", ")"):
                raise self.fail("expected ' ' or ')' in inner list")
        raise self.fail("unterminated inner list")

    # §4.2.3
    def item(self) -> Item:
        value = self.bare_item()
        return Item(value, self.parameters())

    # §4.2.3.2
    def parameters(self) -> dict[str, BareItem]:
        params: dict[str, BareItem] = {}
        while self.peek() == ";":
            self.pos += 1
            self.skip(" ")
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.pos += 1
                value = self.bare_item()
            params[key] = value  # §4.2.3.2: a repeated name overwrites the earlier value
        return params

    # §4.2.3.3
    def key(self) -> str:
        first = self.peek()
        if not (first in _LCALPHA or first == "*"):
            raise self.fail("a key must start with a lower-case letter or '*'")
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _KEY_CHARS:
            self.pos += 1
        return self.text[start : self.pos]

    # §4.2.3.1
    def bare_item(self) -> BareItem:
        ch = self.peek()
        if ch == "-" or ch in _DIGITS:
            return self.number()
        if ch == '"':
            return self.string()
        if ch == "*" or (ch.isascii() and ch.isalpha()):
            return self.token()
        if ch == ":":
            return self.byte_sequence()
        if ch == "?":
            return self.boolean()
        raise self.fail("expected a bare item")

    # §4.2.4
    def number(self) -> int | float:
        sign = 1
        if self.peek() == "-":
            sign = -1
            self.pos += 1
        if self.peek() not in _DIGITS:
            raise self.fail("expected a digit")
        start = self.pos
        is_decimal = False
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in _DIGITS:
                self.pos += 1
            elif ch == "." and not is_decimal:
                if self.pos - start > 12:
                    raise self.fail("decimal integer part longer than 12 digits")
                is_decimal = True
                self.pos += 1
            else:
                break
            if not is_decimal and self.pos - start > 15:
                raise self.fail("integer longer than 15 digits")
            if is_decimal and self.pos - start > 16:
                raise self.fail("decimal longer than 16 characters")
        number = self.text[start : self.pos]
        if not is_decimal:
            return sign * int(number)
        if number.endswith("."):
            raise self.fail("decimal ends with '.'")
        if len(number) - number.index(".") - 1 > 3:
            raise self.fail("decimal with more than 3 fractional digits")
        return sign * float(number)

    # §4.2.5
    def string(self) -> str:
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            self.pos += 1
            if ch == "\\":
                nxt = self.peek()
                if nxt not in ('"', "\\") or not nxt:
                    raise self.fail("invalid escape in string")
                out.append(nxt)
                self.pos += 1
            elif ch == '"':
                return "".join(out)
            elif not (" " <= ch <= "~"):
                raise self.fail("non-printable character in string")
            else:
                out.append(ch)
        raise self.fail("unterminated string")

    # §4.2.6
    def token(self) -> Token:
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text) and self.text[self.pos] in _TOKEN_CHARS:
            self.pos += 1
        return Token(self.text[start : self.pos])

    # §4.2.7
    def byte_sequence(self) -> bytes:
        self.pos += 1
        end = self.text.find(":", self.pos)
        if end < 0:
            raise self.fail("unterminated byte sequence")
        content = self.text[self.pos : end]
        if any(ch not in _BASE64_CHARS for ch in content):
            raise self.fail("invalid base64 in byte sequence")
        self.pos = end + 1
        try:
            # §4.2.7 allows a recipient to accept missing padding; add it back.
            return base64.b64decode(content + "=" * (-len(content) % 4), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise self.fail("invalid base64 in byte sequence") from exc

    # §4.2.8
    def boolean(self) -> bool:
        self.pos += 1
        ch = self.peek()
        if ch not in ("0", "1"):
            raise self.fail("a boolean must be ?0 or ?1")
        self.pos += 1
        return ch == "1"


def _combine(value: str | Sequence[str]) -> str:
    lines = [value] if isinstance(value, str) else list(value)
    # §4.2: discard leading and trailing SP of the combined value; HTAB is not allowed there.
    return ", ".join(lines).strip(" ")


def parse_list(value: str | Sequence[str]) -> list[Member]:
    """Parse an sf-list (one field value, or the lines of a repeated field). Raises StructuredFieldError."""
    parser = _Parser(_combine(value))
    return parser.list_()


def parse_dictionary(value: str | Sequence[str]) -> dict[str, Member]:
    """Parse an sf-dictionary (one field value, or the lines of a repeated field). Raises StructuredFieldError."""
    parser = _Parser(_combine(value))
    return parser.dictionary()


def parse_item(value: str | Sequence[str]) -> Item:
    """Parse an sf-item. Raises StructuredFieldError."""
    parser = _Parser(_combine(value))
    item = parser.item()
    if not parser.at_end():
        raise parser.fail("unexpected characters after the item")
    return item


# Serialisation, §4.1.


def serialize_bare_item(value: BareItem) -> str:
    """Serialise one bare item (§4.1.3.1). Raises StructuredFieldError for values the format cannot carry."""
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, int):
        if abs(value) > _MAX_INTEGER:
            raise StructuredFieldError(f"integer {value} out of range")
        return str(value)
    if isinstance(value, float):
        return _serialize_decimal(value)
    if isinstance(value, Token):
        if not value or not (value[0] == "*" or (value[0].isascii() and value[0].isalpha())):
            raise StructuredFieldError(f"invalid token {value!r}")
        if any(ch not in _TOKEN_CHARS for ch in value):
            raise StructuredFieldError(f"invalid token {value!r}")
        return str(value)
    if isinstance(value, str):
        if any(not (" " <= ch <= "~") for ch in value):
            raise StructuredFieldError(f"string {value!r} has characters outside printable ASCII")
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return f":{base64.b64encode(value).decode('ascii')}:"


def _serialize_decimal(value: float) -> str:
    rounded = round(value, 3)  # §4.1.5: round to three fractional digits, half to even
    if abs(rounded) >= 1e12 or rounded != rounded:
        raise StructuredFieldError(f"decimal {value} out of range")
    text = f"{rounded:.3f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def serialize_params(params: Mapping[str, BareItem]) -> str:
    """Serialise parameters (§4.1.1.2); a ``True`` value is written as the bare key."""
    out: list[str] = []
    for key, value in params.items():
        _check_key(key)
        out.append(f";{key}" if value is True else f";{key}={serialize_bare_item(value)}")
    return "".join(out)


def _check_key(key: str) -> None:
    if not key or not (key[0] in _LCALPHA or key[0] == "*") or any(ch not in _KEY_CHARS for ch in key):
        raise StructuredFieldError(f"invalid key {key!r}")


def serialize_member(member: Member) -> str:
    """Serialise an item or an inner list."""
    if isinstance(member, InnerList):
        inner = " ".join(serialize_member(item) for item in member.items)
        return f"({inner}){serialize_params(member.params)}"
    return serialize_bare_item(member.value) + serialize_params(member.params)


def serialize_list(members: Sequence[Member]) -> str:
    """Serialise an sf-list (§4.1.1)."""
    return ", ".join(serialize_member(member) for member in members)


def serialize_dictionary(members: Mapping[str, Member]) -> str:
    """Serialise an sf-dictionary (§4.1.2); a ``True`` item is written as the bare key with its parameters."""
    out: list[str] = []
    for key, member in members.items():
        _check_key(key)
        if isinstance(member, Item) and member.value is True:
            out.append(key + serialize_params(member.params))
        else:
            out.append(f"{key}={serialize_member(member)}")
    return ", ".join(out)
