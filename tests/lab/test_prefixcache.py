"""The lab engine's prefix cache: a prompt that starts with blocks another prompt computed skips their prefill, under
either policy; the blocks are named from the request document of every API the lab serves."""

from __future__ import annotations

import pytest

from latscope.dialects.prompts import shared_prefix_prompt, synthetic_prompt
from latscope.lab.costmodel import CostModel
from latscope.lab.engine import EngineCore, Policy, simulate
from latscope.lab.prefixcache import BLOCK_TOKENS, MAX_BLOCKS, PrefixCache, prompt_blocks
from latscope.lab.scheduler import GenerationRequest
from latscope.units import NS_PER_MS

#: Prefill only: 0.01 ms per prompt token, no attention term, decode free.
COST = CostModel.default().with_overrides(
    prefill_base_ms=1.0, prefill_per_token_ms=0.01, prefill_quadratic_ms=0.0, decode_base_ms=0.0, decode_per_seq_ms=0.0
)


def _chat(text: str) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def _ttfts_ms(cost: CostModel, policy: Policy, prompts: list[str]) -> tuple[list[float], list[int]]:
    """Each prompt alone, one after another: its TTFT (ms) and the tokens it found cached."""
    core = EngineCore(policy, cost)
    arrivals = []
    for index, text in enumerate(prompts):
        blocks = prompt_blocks(_chat(text))
        tokens = len(blocks) * BLOCK_TOKENS + 8
        arrivals.append((index * 1000 * NS_PER_MS, GenerationRequest(f"r{index}", tokens, 1, prefix_blocks=blocks)))
    stats = simulate(core, arrivals)
    return [s.ttft_ms or 0.0 for s in stats], [s.cached_tokens for s in stats]


@pytest.mark.parametrize("policy", list(Policy))
def test_a_repeated_prefix_is_prefilled_once_and_a_new_one_in_full(policy: Policy) -> None:
    cold = shared_prefix_prompt(2048, 1, 32, 2)
    warm = shared_prefix_prompt(2048, 1, 32, 3)
    fresh = shared_prefix_prompt(2048, 4, 32, 5)
    (t_cold, t_warm, t_fresh), (c_cold, c_warm, c_fresh) = _ttfts_ms(COST, policy, [cold, warm, fresh])
    assert c_cold == 0 and c_fresh == 0
    assert c_warm == 2048  # the prefix's whole blocks (its first token is the role's)
    assert t_fresh == pytest.approx(t_cold)
    assert t_warm < 0.1 * t_cold  # only the suffix's blocks and the last token are computed


def test_without_a_prefix_cache_the_repeat_costs_what_the_first_did() -> None:
    off = COST.with_overrides(prefix_cache_blocks=0)
    cold = shared_prefix_prompt(2048, 1, 32, 2)
    warm = shared_prefix_prompt(2048, 1, 32, 3)
    (t_cold, t_warm), cached = _ttfts_ms(off, Policy.PRIORITY, [cold, warm])
    assert cached == [0, 0] and t_warm == pytest.approx(t_cold)


def test_the_cache_never_serves_a_prompts_last_token_and_counts_what_it_was_asked() -> None:
    cache = PrefixCache(8)
    cache.insert((1, 2, 3))
    assert cache.match((1, 2, 3), 3 * BLOCK_TOKENS) == 3 * BLOCK_TOKENS - 1
    assert cache.match((1, 9, 3), 100) == BLOCK_TOKENS  # a chain breaks at the first block it lacks
    assert cache.queried_tokens == 3 * BLOCK_TOKENS + 100 and cache.hit_tokens == 4 * BLOCK_TOKENS - 1


def test_the_least_recently_used_blocks_leave_first() -> None:
    cache = PrefixCache(3)
    cache.insert((1, 2))
    cache.insert((3,))
    cache.match((1,), 100)  # 1 used again: 2 is now the oldest
    cache.insert((4,))
    assert len(cache) == 3
    assert cache.match((2,), 100) == 0 and cache.match((1,), 100) == BLOCK_TOKENS


def test_blocks_are_named_from_every_api_s_prompt_and_chain_over_what_came_before() -> None:
    text = synthetic_prompt(40, 7)
    chat = prompt_blocks(_chat(text))
    assert len(chat) == 41 // BLOCK_TOKENS  # the role's token and 40 of text: two whole blocks
    anthropic = prompt_blocks({"system": "be brief", "messages": [{"role": "user", "content": [{"text": text}]}]})
    assert len(anthropic) == 2 and anthropic[0] != chat[0]  # the system prompt comes first
    assert len(prompt_blocks({"prompt": text})) == 40 // BLOCK_TOKENS
    assert prompt_blocks({"inputs": text}) == prompt_blocks({"prompt": text})  # TGI's inputs, the same text
    assert prompt_blocks({"prompt": [1, 2, 3] * 20}) == ()  # token ids: not named
    # a block's name stands for everything before it: the same words after a different start differ
    assert prompt_blocks({"prompt": "x " + text})[1] != prompt_blocks({"prompt": "y " + text})[1]


def test_naming_stops_at_a_bound_on_a_huge_prompt() -> None:
    assert len(prompt_blocks({"prompt": synthetic_prompt(BLOCK_TOKENS * MAX_BLOCKS * 3, 1)})) == MAX_BLOCKS
