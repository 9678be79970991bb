"""Paid refinement of guided partitions at large ε (issue 14): the common refinement and the
budget of a refined summary (privacy: P16, P10)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise
from dpsynth.online.guided.partition import guided_partition
from dpsynth.online.guided.refinement import (
    REFINE_FROM,
    REFINE_SHARE,
    common_refinement,
    refine_share,
    refined_partition,
)
from dpsynth.online.privtree import privtree_leaves, privtree_params
from dpsynth.tree import route

KEY = bytes(range(32))

def _cells(depths: np.ndarray, prefixes: np.ndarray, max_depth: int) -> list[tuple[int, int]]:
    """Each leaf as [start, end) at ``max_depth``."""
    shifts = (max_depth - depths).astype(np.uint64)
    return list(zip((prefixes << shifts).tolist(),
                    ((prefixes + np.uint64(1)) << shifts).tolist(), strict=True))


def test_common_refinement_is_the_coarsest_partition_finer_than_both() -> None:
    rng = np.random.default_rng(3)
    noise = KeyedNoise(KEY)
    for trial in range(5):
        cells = np.unique(rng.integers(0, 1 << 12, 40).astype(np.uint64))
        weights = np.ones(cells.size, np.int64)
        a = guided_partition(np.array([0]), np.array([rng.uniform(5, 50)]), 0, 0.1, 1, 12)
        b = privtree_leaves(cells, weights, privtree_params(2.0, max_depth=12), noise,
                            ("t", trial), address_depth=12)
        depths, prefixes = common_refinement(*a, *b, 12)
        leaves = _cells(depths, prefixes, 12)
        assert leaves[0][0] == 0 and leaves[-1][1] == 1 << 12  # covers the cube, in order,
        assert all(x[1] == y[0] for x, y in zip(leaves, leaves[1:], strict=False))  # no gaps
        parents = _cells(*a, 12) + _cells(*b, 12)
        for lo, hi in leaves:  # inside a leaf of a and a leaf of b: finer than both
            assert sum(p_lo <= lo and hi <= p_hi for p_lo, p_hi in parents) == 2
        starts = {lo for lo, _ in parents}  # and no coarser: every cut is a cut of a or b
        assert {lo for lo, _ in leaves} == starts


def test_refinement_is_paid_only_from_REFINE_FROM_and_its_budget_sums_to_the_summary() -> None:
    """Below REFINE_FROM a summary is exactly its guided partition at its whole ε (every
    release at a per-record ε ≤ 16 is unchanged: summaries get at most 0.9·16 < REFINE_FROM);
    from it, ε_s = REFINE_SHARE·ε pays a PrivTree whose leaves are those drawn at the
    summary's split addresses, and the counts get the rest: ε_s + ε_c = ε (P16)."""
    assert REFINE_FROM > 0.9 * 16 and refine_share(REFINE_FROM - 1e-9) == 0.0
    records = route(np.random.default_rng(5).random((300, 1)), depth=20)
    cells, weights = np.unique(records, return_counts=True)
    guided = guided_partition(np.array([0]), np.array([300.0]), 0, 1e-3, 1, 20)
    noise = KeyedNoise(KEY)
    depths, prefixes, counts_eps = refined_partition(records, *guided, 14.4, noise,
                                                     ("c",), max_depth=20)
    assert counts_eps == 14.4 and depths is guided[0] and prefixes is guided[1]
    epsilon = 2 * REFINE_FROM
    depths, prefixes, counts_eps = refined_partition(records, *guided, epsilon, noise,
                                                     ("c",), max_depth=20)
    structure = REFINE_SHARE * epsilon
    assert counts_eps + structure == pytest.approx(epsilon)
    tree = privtree_leaves(cells, weights, privtree_params(structure, max_depth=20), noise,
                           ("c",), address_depth=20)
    expected = common_refinement(*guided, *tree, 20)
    assert (depths == expected[0]).all() and (prefixes == expected[1]).all()
    held = (cells[:, None] >> (20 - depths).astype(np.uint64)[None, :]) == prefixes[None, :]
    assert (held.sum(axis=0) <= 1).mean() > 0.99  # at ε_s = 32 the leaves isolate records
