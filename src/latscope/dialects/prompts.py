"""Synthetic prompts of a chosen length in tokens, for probe, diagnose and bench.

A prompt is lowercase sentences of short, very common English words separated by single spaces, each sentence
ending with a full stop. The token count is exact under two kinds of tokenizer:

- GPT-style byte-level BPE (GPT-2's, ``cl100k_base``, ``o200k_base``, Llama 3's): each word with its leading space
  (`` the``, `` water``) is one token, the first word of the text without one is one token too, and ``.`` is one;
  these pre-tokenizers split ``water.`` into ``water`` + ``.``. SentencePiece vocabularies (Llama 2, Mistral) also
  hold all of these words whole.
- a simple "one token per word or punctuation mark" tokenizer, such as the lab's (``\\w{1,8}|[^\\w\\s]``): every
  word has at most 8 letters.

So ``synthetic_prompt(n)`` is ``n`` tokens of text. A server adds its chat template around it (a few tokens per
message), which is why callers should say "about n tokens".
"""

from __future__ import annotations

import random

WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "as", "with", "his", "they",
    "at", "be", "this", "from", "have", "or", "by", "one", "had", "not", "but", "what", "all", "were", "when", "we",
    "there", "can", "an", "your", "which", "their", "said", "if", "do", "will", "each", "about", "how", "up", "out",
    "them", "then", "she", "many", "some", "so", "these", "would", "other", "into", "has", "more", "her", "two",
    "like", "him", "see", "time", "could", "no", "make", "than", "first", "been", "its", "who", "now", "people",
    "my", "made", "over", "did", "down", "only", "way", "find", "use", "may", "water", "long", "little", "very",
    "after", "words", "called", "just", "where", "most", "know", "get", "come", "part", "new", "take", "work",
    "place", "year", "live", "back", "give", "good", "man", "think", "say", "great", "help", "much", "before",
    "line", "right", "too", "old", "any", "same", "tell", "came", "want", "show", "also", "around", "three",
)  # fmt: skip
"""128 of the most frequent English words, all single tokens (see the module docstring) and at most 8 letters."""

SENTENCE_WORDS = (6, 14)
"""Words per sentence, fewest and most: a full stop every 6–14 words, like ordinary prose."""

_SEED_WORDS = 4
"""The first words spell the seed in base len(WORDS), so different seeds (below 128**4) never share a first token
and a server's prefix cache cannot reuse one prompt's blocks for another's."""


def synthetic_prompt(n_tokens: int, seed: int = 0) -> str:
    """Deterministic text of exactly ``n_tokens`` tokens (words and full stops; see the module docstring).

    The same ``(n_tokens, seed)`` always gives the same text, and a shorter prompt with the same seed is a prefix of
    a longer one. ``n_tokens`` 0 gives "".
    """
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if n_tokens == 0:
        return ""
    base = len(WORDS)
    value = seed % base**_SEED_WORDS
    words = [WORDS[(value // base**i) % base] for i in range(_SEED_WORDS)]
    words += random.Random(seed).choices(WORDS, k=max(0, n_tokens - _SEED_WORDS))
    # Sentence lengths come from a second generator, so they do not depend on how many words were drawn: that keeps
    # a shorter prompt a prefix of a longer one.
    stops = random.Random(f"sentence-lengths:{seed}")
    sentences: list[str] = []
    used = 0  # tokens placed: words and full stops
    taken = 0  # words placed
    while used < n_tokens:
        length = min(stops.randint(*SENTENCE_WORDS), n_tokens - used)
        sentence = " ".join(words[taken : taken + length])
        taken += length
        used += length
        if used < n_tokens:
            sentence += "."
            used += 1
        sentences.append(sentence)
    return " ".join(sentences)


def shared_prefix_prompt(prefix_tokens: int, prefix_seed: int, suffix_tokens: int, suffix_seed: int) -> str:
    """A prompt of exactly ``prefix_tokens + suffix_tokens`` tokens: the text of ``(prefix_tokens, prefix_seed)``,
    then a space, then the text of ``(suffix_tokens, suffix_seed)``. Two prompts with one prefix seed share their
    first ``prefix_tokens`` tokens (the space is free and starts the suffix's first token, as any word's), as a
    system prompt or a conversation so far opens every request of a session; different suffix seeds part them from
    there."""
    prefix = synthetic_prompt(prefix_tokens, prefix_seed)
    suffix = synthetic_prompt(suffix_tokens, suffix_seed)
    return f"{prefix} {suffix}" if prefix and suffix else prefix or suffix
