"""The concurrency sweep lengthens streams that a lone request finishes too fast to show a wait for a slot."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latscope.checks.saturation import MIN_SERVICE_SPAN_MS
from latscope.diagnose.experiments.saturation import (
    MAX_TOKENS,
    MAX_TOKENS_CEILING,
    TARGET_SERVICE_SPAN_MS,
    lengthened_max_tokens,
)


def test_a_stream_that_lasts_long_enough_keeps_its_length() -> None:
    assert lengthened_max_tokens(TARGET_SERVICE_SPAN_MS) == MAX_TOKENS
    assert lengthened_max_tokens(500.0) == MAX_TOKENS


def test_a_short_stream_is_lengthened_in_proportion() -> None:
    # 16 tokens in 6 ms (a tiny model on llama-server): about 40 ms takes 107 tokens
    assert lengthened_max_tokens(6.0) == 107
    assert lengthened_max_tokens(20.0) == 2 * MAX_TOKENS


def test_the_lengthened_stream_is_capped() -> None:
    assert lengthened_max_tokens(0.0) == MAX_TOKENS_CEILING
    assert lengthened_max_tokens(-3.0) == MAX_TOKENS_CEILING


@given(st.floats(min_value=-10.0, max_value=10_000.0, allow_nan=False))
def test_the_length_never_shrinks_and_stays_bounded(span_ms: float) -> None:
    tokens = lengthened_max_tokens(span_ms)
    assert MAX_TOKENS <= tokens <= MAX_TOKENS_CEILING
    if 1.0 <= span_ms < TARGET_SERVICE_SPAN_MS and tokens < MAX_TOKENS_CEILING:
        # at the same decode speed the lengthened stream lasts at least the target, well above the check's minimum
        assert span_ms * tokens / MAX_TOKENS >= TARGET_SERVICE_SPAN_MS > MIN_SERVICE_SPAN_MS
