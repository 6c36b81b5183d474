"""synthetic_prompt: deterministic text of an exact token count."""

from __future__ import annotations

import re

import pytest

from latscope.dialects.prompts import WORDS, synthetic_prompt

# The "one token per word or punctuation mark" rule.
SIMPLE_TOKEN = re.compile(r"\w+|[^\w\s]")
# GPT-2's pre-tokenizer pattern restricted to ASCII (byte-level BPE never merges across these pieces); cl100k's and
# o200k's patterns split this text the same way.
GPT2_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


@pytest.mark.parametrize("n", [1, 2, 5, 14, 15, 16, 100, 1000, 8191])
def test_token_count_is_exact_under_one_token_per_word_or_mark(n: int) -> None:
    assert len(SIMPLE_TOKEN.findall(synthetic_prompt(n, seed=n))) == n


@pytest.mark.parametrize("n", [1, 7, 100, 2048])
def test_gpt_pretokens_are_each_one_vocabulary_word_or_a_full_stop(n: int) -> None:
    pieces = GPT2_PRETOKEN.findall(synthetic_prompt(n, seed=3))
    assert len(pieces) == n
    assert all(piece == "." or piece.lstrip(" ") in WORDS for piece in pieces)


def test_words_are_unique_short_and_lowercase() -> None:
    assert len(set(WORDS)) == len(WORDS) == 128
    assert all(word.isascii() and word.isalpha() and word.islower() and len(word) <= 8 for word in WORDS)


def test_same_seed_same_text() -> None:
    assert synthetic_prompt(500, seed=42) == synthetic_prompt(500, seed=42)


def test_different_seeds_differ_from_the_first_word() -> None:
    firsts = {synthetic_prompt(20, seed=seed).split()[0] for seed in range(len(WORDS))}
    assert len(firsts) == len(WORDS)


def test_a_shorter_prompt_is_a_prefix_of_a_longer_one() -> None:
    assert synthetic_prompt(1000, seed=9).startswith(synthetic_prompt(333, seed=9))


def test_sentences_end_with_full_stops() -> None:
    text = synthetic_prompt(200, seed=1)
    sentences = text.split(". ")
    assert len(sentences) > 10
    assert all(6 <= len(sentence.rstrip(".").split()) <= 14 for sentence in sentences[:-1])


def test_zero_tokens_is_empty() -> None:
    assert synthetic_prompt(0) == ""


def test_negative_length_is_rejected() -> None:
    with pytest.raises(ValueError, match="n_tokens"):
        synthetic_prompt(-1)
