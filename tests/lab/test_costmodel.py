"""The cost model: step durations follow the documented formulas; presets are what they claim."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from latscope.lab.costmodel import CostModel

SMALL = CostModel(
    prefill_base_ms=2.0,
    prefill_per_token_ms=0.5,
    prefill_quadratic_ms=0.001,
    decode_base_ms=10.0,
    decode_per_seq_ms=0.25,
    kv_blocks=100,
    max_batch=8,
    chunk_tokens=64,
)


def test_prefill_is_base_plus_linear_plus_quadratic() -> None:
    # a + b·n + c·n² = 2 + 0.5·100 + 0.001·10 000
    assert SMALL.prefill_ms(100) == pytest.approx(2.0 + 50.0 + 10.0)


def test_decode_step_is_base_plus_per_sequence() -> None:
    assert SMALL.decode_step_ms(1) == pytest.approx(10.25)
    assert SMALL.decode_step_ms(8) == pytest.approx(12.0)


def test_an_empty_decode_batch_costs_nothing() -> None:
    assert SMALL.decode_step_ms(0) == 0.0


@given(st.integers(min_value=1, max_value=40_000), st.lists(st.integers(min_value=1, max_value=5000), max_size=20))
def test_prefill_chunks_add_up_to_the_whole_prompt(prompt: int, cuts: list[int]) -> None:
    # Chunked prefill neither saves nor loses compute: only the per-step base differs.
    start = 0
    total = 0.0
    for size in cuts:
        size = min(size, prompt - start)
        if size <= 0:
            break
        total += SMALL.prefill_chunk_ms(start, size)
        start += size
    if start < prompt:
        total += SMALL.prefill_chunk_ms(start, prompt - start)
    assert total == pytest.approx(SMALL.prefill_ms(prompt) - SMALL.prefill_base_ms, rel=1e-9)


def test_kv_blocks_round_up() -> None:
    assert SMALL.kv_blocks_for(16) == 1
    assert SMALL.kv_blocks_for(17) == 2
    assert SMALL.kv_capacity_tokens == 1600


def test_default_decodes_in_10_to_20_ms_per_step_at_small_batches() -> None:
    cost = CostModel.default()
    for batch in (1, 8, 32, 64):
        assert 10.0 <= cost.decode_step_ms(batch) <= 20.0


def test_default_prefills_tens_of_thousands_of_tokens_per_second() -> None:
    cost = CostModel.default()
    tokens_per_s = 4096 / (cost.prefill_ms(4096) / 1000)
    assert 15_000 <= tokens_per_s <= 40_000


def test_default_prefill_bends_upward_only_for_long_contexts() -> None:
    cost = CostModel.default()
    linear_share_1k = cost.prefill_per_token_ms * 1024 / cost.prefill_ms(1024)
    quadratic_share_32k = cost.prefill_quadratic_ms * 32768**2 / cost.prefill_ms(32768)
    assert linear_share_1k > 0.9
    assert 0.1 < quadratic_share_32k < 0.3


def test_zero_costs_nothing_but_keeps_capacity() -> None:
    zero = CostModel.zero()
    assert zero.is_zero
    assert zero.prefill_ms(32768) == 0.0
    assert zero.decode_step_ms(256) == 0.0
    assert zero.kv_blocks == CostModel.default().kv_blocks
    assert not CostModel.default().is_zero


def test_with_overrides_replaces_only_the_named_fields() -> None:
    changed = SMALL.with_overrides(decode_base_ms=1.0, kv_blocks=7)
    assert changed.decode_base_ms == 1.0
    assert changed.kv_blocks == 7
    assert changed.prefill_base_ms == SMALL.prefill_base_ms
    assert SMALL.decode_base_ms == 10.0


def test_with_overrides_rejects_unknown_fields() -> None:
    with pytest.raises(TypeError):
        SMALL.with_overrides(decode_ms=1.0)


@pytest.mark.parametrize("field", ["prefill_base_ms", "decode_per_seq_ms"])
def test_negative_costs_are_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SMALL.with_overrides(**{field: -1.0})


@pytest.mark.parametrize("field", ["kv_blocks", "max_batch", "chunk_tokens", "kv_block_tokens"])
def test_capacities_below_one_are_rejected(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SMALL.with_overrides(**{field: 0})


def test_the_model_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SMALL.decode_base_ms = 1.0  # type: ignore[misc]
