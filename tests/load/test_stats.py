"""Percentile summaries agree with pandas and ignore missing values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from latscope.load.stats import Dist, describe


def test_percentiles_match_pandas_quantiles() -> None:
    values = np.random.default_rng(0).lognormal(3, 1, size=1001)
    d = describe(values)
    assert d is not None
    series = pd.Series(values)
    for q, got in ((0.5, d.p50), (0.9, d.p90), (0.95, d.p95), (0.99, d.p99)):
        assert got == series.quantile(q)
    assert (d.min, d.max, d.count) == (values.min(), values.max(), 1001)


def test_none_and_nan_are_ignored() -> None:
    d = describe([1.0, None, float("nan"), 3.0])
    assert d is not None and d.count == 2 and d.mean == 2.0


def test_no_values_gives_none() -> None:
    assert describe([]) is None
    assert describe([None]) is None


def test_dict_round_trip() -> None:
    d = describe([1.0, 2.0, 3.0])
    assert d is not None
    assert Dist.from_dict(d.to_dict()) == d
