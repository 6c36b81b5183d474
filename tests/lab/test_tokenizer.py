"""The lab tokenizer counts words and punctuation; long words count by pieces; textgen emits one token per word."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.lab.textgen import VOCABULARY, VOCABULARY_SIZE, seed_for, token_text
from latscope.lab.tokenizer import (
    MAX_WORD_CHARS,
    MESSAGE_OVERHEAD_TOKENS,
    NAME_OVERHEAD_TOKENS,
    REPLY_PRIMING_TOKENS,
    count_message_tokens,
    count_tokens,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("   \n\t ", 0),
        ("Hello, world!", 4),
        ("one two  three", 3),
        ("don't", 3),  # don ' t
        ("naïve café", 2),  # \w is Unicode-aware
        ("a+b=c;", 6),
        ("12345678", 1),
        ("123456789", 2),
    ],
)
def test_counts_words_and_punctuation(text: str, tokens: int) -> None:
    assert count_tokens(text) == tokens


@pytest.mark.parametrize("length", [1, MAX_WORD_CHARS, MAX_WORD_CHARS + 1, 20, 100])
def test_long_words_count_one_token_per_piece(length: int) -> None:
    assert count_tokens("x" * length) == -(-length // MAX_WORD_CHARS)


def test_a_chat_message_costs_its_text_plus_the_documented_overhead() -> None:
    messages = [{"role": "user", "content": "Hello, world!"}]
    assert count_message_tokens(messages) == REPLY_PRIMING_TOKENS + MESSAGE_OVERHEAD_TOKENS + 1 + 4


def test_a_named_message_costs_its_name_too() -> None:
    plain = count_message_tokens([{"role": "user", "content": "hi"}])
    named = count_message_tokens([{"role": "user", "content": "hi", "name": "alice"}])
    assert named - plain == NAME_OVERHEAD_TOKENS + 1


def test_content_parts_count_their_text_only() -> None:
    parts = [{"type": "text", "text": "one two"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    assert count_message_tokens([{"role": "user", "content": parts}]) == count_message_tokens(
        [{"role": "user", "content": "one two"}]
    )


def test_missing_or_odd_content_counts_nothing() -> None:
    assert count_message_tokens([{"role": "system", "content": None}]) == (
        REPLY_PRIMING_TOKENS + MESSAGE_OVERHEAD_TOKENS + 1
    )
    assert count_message_tokens([]) == REPLY_PRIMING_TOKENS


def test_generated_text_is_deterministic_per_seed_and_index() -> None:
    assert [token_text(42, i) for i in range(50)] == [token_text(42, i) for i in range(50)]
    assert [token_text(42, i) for i in range(50)] != [token_text(43, i) for i in range(50)]


def test_generated_text_uses_much_of_the_vocabulary() -> None:
    seen = {token_text(7, i) for i in range(20_000)}
    assert len(VOCABULARY) == VOCABULARY_SIZE
    assert len(seen) > VOCABULARY_SIZE * 0.9


@given(st.integers(min_value=-(2**70), max_value=2**70), st.integers(min_value=0, max_value=10**9))
def test_every_generated_token_is_one_lab_token_with_a_leading_space(seed: int, index: int) -> None:
    text = token_text(seed, index)
    assert text.startswith(" ")
    assert count_tokens(text) == 1


def test_request_seeds_are_stable_and_depend_on_the_base_seed() -> None:
    assert seed_for("req-1") == seed_for("req-1")
    assert seed_for("req-1") != seed_for("req-2")
    assert seed_for("req-1", 1) != seed_for("req-1", 2)
