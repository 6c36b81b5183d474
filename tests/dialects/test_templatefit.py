"""The compiled template fit (``latscope.dialects._templatefit``) against the Python one: it accepts nothing the
Python fit refuses, gives the same texts, and is not stricter where events are plain (JSON numbers in the number
holes, printable texts with no quote or backslash)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from latscope.dialects import templates
from tests.dialects.test_templates import learnt, tgi
from tests.support.compiled import required

COMPILED_FIT = templates._compiled_fit()

pytestmark = pytest.mark.skipif(
    COMPILED_FIT is None and not required(),
    reason="latscope.dialects._templatefit was not built (no C compiler when the package was installed)",
)

JSON_NUMBERS_RE = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
JSON_NUMBERS = st.from_regex(r"-?(0|[1-9][0-9]{0,6})(\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
HOLE_VALUES = st.one_of(
    JSON_NUMBERS,
    st.sampled_from(["null", "true", "false", "[]", "{}", " 7 ", "[1", "1,2", '"x"', "", "01", "1.", "-", "1e"]),
    st.text(alphabet="0123456789-+.eE,[]{} ", max_size=6),
)
TEXTS = st.one_of(st.text(min_size=0, max_size=12), st.text(alphabet=' ab"\\{}:,é\ud800\x00\t', max_size=8))


@settings(max_examples=400, deadline=None)
@given(events=st.lists(st.tuples(HOLE_VALUES, HOLE_VALUES, TEXTS, HOLE_VALUES), min_size=1, max_size=6))
@example(events=[("1", "2", " a", "-0.5"), ("[1", "2]", " b", "3,4")])
def test_the_compiled_fit_accepts_nothing_the_python_fit_refuses_and_gives_its_texts(
    events: list[tuple[str, str, str, str]],
) -> None:
    assert COMPILED_FIT is not None, "latscope.dialects._templatefit was not built"
    template = learnt()
    values = [tgi(index, token_id, text, logprob) for index, token_id, text, logprob in events]
    compiled = COMPILED_FIT(values, template._fit_pieces, template._fit_kinds, template.text_hole)
    python = python_texts(template, values)
    if compiled is not None:
        assert compiled == python
    plain = all(
        JSON_NUMBERS_RE.fullmatch(n) and magnitude(n) <= 300
        for index, token_id, _, logprob in events
        for n in (index, token_id, logprob)
    ) and all(t and not any(c in t for c in '"\\') and t.isprintable() for _, _, t, _ in events)
    if python is not None and plain:
        assert compiled == python  # what both accept, the compiled one is not stricter about


def magnitude(number: str) -> int:
    """A JSON number's integer digits (none for a leading 0) plus its exponent: the compiled fit takes up to 300."""
    found = JSON_NUMBERS_RE.fullmatch(number)
    assert found is not None
    digits = 0 if found[1] == "0" else len(found[1])
    return digits + max(0, int(found[3][1:]) if found[3] else 0)


def python_texts(template: templates.EventTemplate, values: list[str]) -> list[str] | None:
    """``template.texts(values)`` with the Python fit alone."""
    fit, templates._fit = templates._fit, None
    try:
        return template.texts(values)
    finally:
        templates._fit = fit


def test_a_templated_run_goes_through_the_compiled_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    assert COMPILED_FIT is not None, "latscope.dialects._templatefit was not built"
    calls: list[int] = []

    def counting(values: list[str], pieces: tuple[str, ...], kinds: bytes, text_hole: int) -> list[str] | None:
        calls.append(len(values))
        return COMPILED_FIT(values, pieces, kinds, text_hole)

    monkeypatch.setattr(templates, "_fit", counting)
    values = [tgi(i, i * 37, f" w{i}", f"-0.{i}5") for i in range(1, 50)]
    assert learnt().texts(values) == [f" w{i}" for i in range(1, 50)]
    assert calls == [49]


def test_bad_arguments_are_refused_with_a_type_or_value_error() -> None:
    assert COMPILED_FIT is not None, "latscope.dialects._templatefit was not built"
    with pytest.raises(ValueError, match="one more than kinds"):
        COMPILED_FIT(["x"], ("a",), b"s", 0)
    with pytest.raises(ValueError, match="text hole"):
        COMPILED_FIT(["x"], ("a", "b"), b"n", 0)
    with pytest.raises(TypeError):
        COMPILED_FIT(("x",), ("a", "b"), b"s", 0)  # type: ignore[arg-type]
    assert COMPILED_FIT([b"x"], ('{"t":"', '"}'), b"s", 0) is None  # type: ignore[list-item]  # not a str: no fit
    assert COMPILED_FIT(['{"t":"x"}'], ('{"t":"', '"}'), b"s", 0) == ["x"]
