"""RFC 8941 structured fields: the subset the rate-limit and cache headers use, strictly."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.signals.structured import (
    BareItem,
    InnerList,
    Item,
    Member,
    StructuredFieldError,
    Token,
    parse_dictionary,
    parse_item,
    parse_list,
    serialize_dictionary,
    serialize_list,
)


def test_ratelimit_item_with_integer_parameters() -> None:
    assert parse_list('"default";r=50;t=30') == [Item("default", {"r": 50, "t": 30})]


def test_every_bare_item_type_is_told_apart() -> None:
    members = parse_list('abc;a=?0;b, "x", 1.5, -2, :cHJldGVuZA==:, ?1, *tok/en:x')
    values = [m.value for m in members if isinstance(m, Item)]
    assert [type(v).__name__ for v in values] == ["Token", "str", "float", "int", "bytes", "bool", "Token"]
    assert values == [Token("abc"), "x", 1.5, -2, b"pretend", True, Token("*tok/en:x")]
    first = members[0]
    assert isinstance(first, Item) and first.params == {"a": False, "b": True}


def test_inner_list_with_parameters_is_parsed() -> None:
    (member,) = parse_list('("a" "b");w=60')
    assert member == InnerList((Item("a"), Item("b")), {"w": 60})


def test_dictionary_members_without_value_are_true() -> None:
    assert parse_dictionary("limit=100, remaining=50, reset=30") == {
        "limit": Item(100),
        "remaining": Item(50),
        "reset": Item(30),
    }
    assert parse_dictionary("a, b=?0;p") == {"a": Item(True), "b": Item(False, {"p": True})}


def test_repeated_field_lines_are_combined_with_a_comma() -> None:
    assert parse_list(['"a";q=1', '"b";q=2']) == [Item("a", {"q": 1}), Item("b", {"q": 2})]


def test_repeated_parameter_keeps_the_last_value() -> None:
    assert parse_item("1;a=1;a=2") == Item(1, {"a": 2})


def test_leading_and_trailing_spaces_are_ignored() -> None:
    assert parse_list("  1 ,  2  ") == [Item(1), Item(2)]


@pytest.mark.parametrize(
    "text",
    [
        "1,",  # trailing comma
        "1.1234",  # more than three fractional digits
        "1234567890123456",  # integer longer than 15 digits
        "1234567890123.5",  # decimal integer part longer than 12 digits
        "1.",  # decimal ending with '.'
        '"open',  # unterminated string
        r'"a\q"',  # invalid escape
        '"caf\u00e9"',  # non-ASCII in a string
        ":abc$:",  # invalid base64
        "?2",  # not a boolean
        "(1 2",  # unterminated inner list
        "1;A=2",  # upper-case key
        "1 2",  # two items without a comma
        "@123",  # RFC 9651 Date: not supported
    ],
)
def test_invalid_lists_fail_as_a_whole(text: str) -> None:
    with pytest.raises(StructuredFieldError):
        parse_list(text)


def test_dictionary_with_upper_case_key_fails() -> None:
    with pytest.raises(StructuredFieldError):
        parse_dictionary("Limit=100")


@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_structured_field_error(text: str) -> None:
    for parse in (parse_list, parse_dictionary, parse_item):
        with contextlib.suppress(StructuredFieldError):
            parse(text)


_keys = st.from_regex(r"[a-z*][a-z0-9_.*\-]{0,6}", fullmatch=True)
_bare: st.SearchStrategy[BareItem] = st.one_of(
    st.integers(-999_999_999_999_999, 999_999_999_999_999),
    st.integers(-999_999_999_999_999, 999_999_999_999_999).map(lambda i: i / 1000),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12),
    st.from_regex(r"[A-Za-z*][A-Za-z0-9!#$%&'*+.^_`|~:/\-]{0,8}", fullmatch=True).map(Token),
    st.binary(max_size=12),
    st.booleans(),
)
_params = st.dictionaries(_keys, _bare, max_size=3)
_item = st.builds(Item, _bare, _params)
_member: st.SearchStrategy[Member] = st.one_of(
    _item, st.builds(InnerList, st.lists(_item, max_size=3).map(tuple), _params)
)


def _shape(value: object) -> object:
    """Structure with types, so that Token("a") != "a" and True != 1 in the comparison."""
    if isinstance(value, Item):
        return ("item", _shape(value.value), _shape(dict(value.params)))
    if isinstance(value, InnerList):
        return ("inner", tuple(_shape(item) for item in value.items), _shape(dict(value.params)))
    if isinstance(value, dict):
        return tuple((key, _shape(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_shape(item) for item in value)
    return (type(value).__name__, value)


@given(st.lists(_member, min_size=1, max_size=4))
def test_serialised_lists_parse_back_identically(members: list[Member]) -> None:
    assert _shape(parse_list(serialize_list(members))) == _shape(members)


@given(st.dictionaries(_keys, _member, min_size=1, max_size=4))
def test_serialised_dictionaries_parse_back_identically(members: dict[str, Member]) -> None:
    assert _shape(parse_dictionary(serialize_dictionary(members))) == _shape(members)
