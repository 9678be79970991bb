"""Consistency (diss. Alg 3 = HVZ Alg 4 with spec C.7): properties on random noisy trees."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsynth.consistency import make_consistent, split_parents


@settings(max_examples=300, deadline=None)
@given(
    parents=st.lists(st.integers(0, 10**6), min_size=1, max_size=16),
    data=st.data(),
)
def test_split_is_comparable_nonnegative_and_sums(parents: list[int], data: st.DataObject) -> None:
    children = data.draw(
        st.lists(st.integers(-10**6, 2 * 10**6), min_size=2 * len(parents),
                 max_size=2 * len(parents))
    )
    out = split_parents(np.array(parents), np.array(children)).reshape(-1, 2)
    a = np.clip(np.array(children).reshape(-1, 2), 0, None)
    assert (out >= 0).all()
    np.testing.assert_array_equal(out.sum(axis=1), parents)
    # comparable: both children move in the same direction (or not at all)
    diff = out - a
    assert ((diff[:, 0] >= 0) & (diff[:, 1] >= 0) | (diff[:, 0] <= 0) & (diff[:, 1] <= 0)).all()


def test_proportional_split_and_data_independent_tie_break() -> None:
    # deficit: grow both in proportion (rounded down for child 0); surplus: shrink both
    assert split_parents(np.array([12]), np.array([2, 1])).tolist() == [8, 4]
    assert split_parents(np.array([3]), np.array([10, 5])).tolist() == [2, 1]
    # both children 0 (routine right after a level starts, C.4): equal split, the odd unit to
    # child 0 of even parents and to child 1 of odd parents, whatever the data
    assert split_parents(np.array([5, 5]), np.array([0, -3, -1, 0])).tolist() == [3, 2, 2, 3]


def test_make_consistent_levels_add_up() -> None:
    rng = np.random.default_rng(0)
    noisy = [rng.integers(-20, 200, 2**j) for j in range(1, 11)]
    levels = make_consistent(5000, noisy)
    parent = np.array([5000])
    for level in levels:
        np.testing.assert_array_equal(level.reshape(-1, 2).sum(axis=1), parent)
        parent = level
    assert levels[-1].sum() == 5000 and levels[-1].min() >= 0
