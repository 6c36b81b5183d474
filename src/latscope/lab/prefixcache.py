"""The lab engine's prefix cache: KV blocks of prompts it has computed, found again by the prompt's leading tokens.

A prompt is cut into blocks of :data:`BLOCK_TOKENS` tokens (the lab tokenizer's), and each full block is named by a
hash chained over every block before it, so a block's name stands for the whole prefix up to its end (vLLM's
automatic prefix caching keys its blocks the same way). An admitted request whose first blocks are held skips their
prefill: the engine computes only the rest, attention over the cached part included
(:meth:`~latscope.lab.costmodel.CostModel.prefill_chunk_ms` from the first uncached position). A prompt's blocks
enter the cache when its prefill completes; the least recently used leave it past the cache's capacity.

Known simplification: the cached blocks are kept beside the KV budget (:attr:`CostModel.kv_blocks`), not inside it,
so a full cache never preempts and never evicts for a running sequence.

The blocks are named from the request document by :func:`prompt_blocks`, which reads the prompt's text the way each
API the lab serves carries it: ``system``, then ``messages`` (or Responses' ``input`` items) role and text, then a
plain ``prompt`` / ``input`` / ``inputs`` string. Only the first :data:`MAX_BLOCKS` blocks are named: the hashing
stays bounded on a multi-megabyte prompt (the gateway's own cost is what the parsing experiments measure).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from latscope.lab.tokenizer import token_ends

#: Tokens per cached block (vLLM's default block size on GPUs).
BLOCK_TOKENS = 16
#: Blocks named per prompt at most: 4,096 tokens, twice a diagnosis's shared prefix; it bounds the hashing at ~1 ms.
MAX_BLOCKS = 256


def _texts(document: Mapping[str, Any]) -> Iterator[str]:
    """The prompt's text pieces, in the order a model reads them (see the module docstring)."""
    system = document.get("system")
    yield from _content_texts(system)
    for key in ("messages", "input"):
        items = document.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping):
                    role = item.get("role")
                    if isinstance(role, str):
                        yield role
                    yield from _content_texts(item.get("content"))
    for key in ("prompt", "input", "inputs"):
        value = document.get(key)
        if isinstance(value, str):
            yield value


def _content_texts(content: object) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                yield part["text"]


def prompt_blocks(document: Mapping[str, Any]) -> tuple[int, ...]:
    """The chained names of the prompt's full blocks (at most :data:`MAX_BLOCKS`); () for a prompt of fewer than
    :data:`BLOCK_TOKENS` tokens or one given as token ids. A block is named by its text (spaces included) and the
    name of the block before it."""
    text = "\n".join(_texts(document))
    ends = token_ends(text, BLOCK_TOKENS * MAX_BLOCKS)
    names: list[int] = []
    name = 0
    start = 0
    for index in range(BLOCK_TOKENS - 1, len(ends), BLOCK_TOKENS):
        end = ends[index]
        name = hash((name, text[start:end]))
        names.append(name)
        start = end
    return tuple(names)


class PrefixCache:
    """Block names the engine holds the KV of, least recently used first, at most ``capacity_blocks`` of them;
    ``queried_tokens`` and ``hit_tokens`` count prompt tokens looked up and found (vLLM's
    ``prefix_cache_queries`` / ``prefix_cache_hits``)."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"a prefix cache holds at least one block, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._blocks: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.queried_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, blocks: Iterable[int], prompt_tokens: int) -> int:
        """Tokens of a ``prompt_tokens``-token prompt whose leading ``blocks`` are held: whole blocks, and never
        the prompt's last token (its logits must be computed, as vLLM recomputes it on a full hit)."""
        held = 0
        for name in blocks:
            if name not in self._blocks:
                break
            self._blocks.move_to_end(name)
            held += 1
        cached = min(held * BLOCK_TOKENS, prompt_tokens - 1)
        self.queried_tokens += prompt_tokens
        self.hit_tokens += max(0, cached)
        return max(0, cached)

    def insert(self, blocks: Iterable[int]) -> None:
        """Hold ``blocks`` (a computed prompt's), evicting the least recently used past the capacity."""
        for name in blocks:
            self._blocks[name] = None
            self._blocks.move_to_end(name)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
