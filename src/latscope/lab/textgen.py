"""Deterministic token text for the lab's simulated engine.

The lab generates no language, only plausible-looking tokens whose text depends on nothing but ``(seed, index)``: the
same request seed gives the same stream byte for byte, on any machine and in any order of generation, which makes
streams comparable across runs and checkable in tests.

Each token is one short made-up word with a leading space (``" tamo"``), drawn from a fixed vocabulary of
:data:`VOCABULARY_SIZE` words built from consonant-vowel syllables. Under the lab's tokenizer
(:mod:`latscope.lab.tokenizer`) every such word counts as exactly one token.
"""

from __future__ import annotations

import zlib

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = tuple(c + v for c in _CONSONANTS for v in _VOWELS)  # 70 syllables

VOCABULARY_SIZE = 4096
"""Words in the vocabulary: a power of two, so a hash picks one with a mask."""


def _build_vocabulary() -> tuple[str, ...]:
    # Two-syllable words first (4900 of them, more than enough), in a fixed order: the vocabulary never changes.
    words = [" " + a + b for a in _SYLLABLES for b in _SYLLABLES]
    return tuple(words[:VOCABULARY_SIZE])


VOCABULARY: tuple[str, ...] = _build_vocabulary()

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN = 0x9E37_79B9_7F4A_7C15  # 2⁶⁴ / φ: spreads consecutive indices over the whole 64-bit range
_MIX = 0xBF58_476D_1CE4_E5B9  # splitmix64's first multiplier
_INDEX_MASK = VOCABULARY_SIZE - 1


def token_text(seed: int, index: int) -> str:
    """Text of token ``index`` (0-based) of the stream seeded with ``seed``: one vocabulary word, leading space."""
    h = ((seed ^ (index * _GOLDEN)) * _MIX) & _MASK64
    return VOCABULARY[(h >> 40) & _INDEX_MASK]


def seed_for(request_id: str, base_seed: int = 0) -> int:
    """A stable seed for a request that brought none: ``base_seed`` mixed with a CRC-32 of its id (Python's
    ``hash()`` of a string changes between processes, this does not)."""
    return (base_seed * _GOLDEN + zlib.crc32(request_id.encode("utf-8", "surrogatepass"))) & _MASK64
