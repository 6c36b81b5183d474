"""Token-length distributions: the text forms and what the samples look like."""

from __future__ import annotations

import numpy as np
import pytest

from latscope.load.lengths import LengthDist, LengthKind, LengthSpecError, parse_length


@pytest.mark.parametrize(
    ("text", "kind", "a", "b", "cap"),
    [
        ("128", LengthKind.FIXED, 128, 0, None),
        ("fixed(64)", LengthKind.FIXED, 64, 0, None),
        ("uniform(10, 20)", LengthKind.UNIFORM, 10, 20, None),
        ("normal(256,64)", LengthKind.NORMAL, 256, 64, None),
        ("lognormal(256,0.6,max=4096)", LengthKind.LOGNORMAL, 256, 0.6, 4096),
    ],
)
def test_parse_length_reads_every_form(text: str, kind: LengthKind, a: float, b: float, cap: int | None) -> None:
    dist = parse_length(text)
    assert (dist.kind, dist.a, dist.b, dist.max_tokens) == (kind, a, b, cap)


def test_text_form_round_trips() -> None:
    for text in ("fixed(128)", "uniform(10,20)", "normal(256,64)", "lognormal(256,0.6,max=4096)"):
        assert str(parse_length(text)) == text


@pytest.mark.parametrize("text", ["", "abc", "normal(1)", "uniform(5,2)", "poisson(3)", "fixed(-1)", "normal(a,b)"])
def test_bad_length_specs_raise_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(LengthSpecError):
        parse_length(text)


def test_fixed_is_exact() -> None:
    assert set(LengthDist.fixed(37).sample(np.random.default_rng(0), 100).tolist()) == {37}


def test_uniform_stays_inside_both_ends_and_reaches_them() -> None:
    values = parse_length("uniform(3,6)").sample(np.random.default_rng(1), 2000)
    assert values.min() == 3 and values.max() == 6


def test_normal_has_the_requested_mean_and_is_never_below_one() -> None:
    values = parse_length("normal(200,40)").sample(np.random.default_rng(2), 20_000)
    assert abs(values.mean() - 200) < 2
    assert abs(values.std() - 40) < 2
    assert parse_length("normal(2,50)").sample(np.random.default_rng(3), 1000).min() >= 1


def test_lognormal_mean_is_the_user_mean_and_has_a_right_tail() -> None:
    values = parse_length("lognormal(300,0.8)").sample(np.random.default_rng(4), 50_000)
    assert abs(values.mean() / 300 - 1) < 0.03
    assert np.median(values) < values.mean()  # right-skewed


def test_max_clips_samples() -> None:
    values = parse_length("lognormal(300,1.5,max=500)").sample(np.random.default_rng(5), 5000)
    assert values.max() == 500
