"""The per-request percentiles of the records (one sort for the whole batch) are numpy's own, group by group."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from latscope.runs.records import _group_percentiles

groups_of_values = st.lists(
    st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), max_size=40), min_size=1, max_size=12
)


@given(groups_of_values, st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=4))
def test_each_group_gets_numpy_s_percentile_and_an_empty_group_nan(groups: list[list[float]], qs: list[float]) -> None:
    values = np.array([v for group in groups for v in group], dtype=np.float64)
    labels = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    # the batch arrives in any order: shuffle it
    order = np.random.default_rng(len(values)).permutation(values.size)
    outs = _group_percentiles(values[order], labels[order], len(groups), qs)
    for q, out in zip(qs, outs, strict=True):
        for i, group in enumerate(groups):
            if group:
                assert out[i] == np.percentile(group, q)
            else:
                assert np.isnan(out[i])
