"""dpsynth.online.guided.local_mass: dropped leaves' noisy mass goes to the nearest kept leaves.

The oracle works on the leaves as cells of the cube (intervals of finest cells and their
ancestors' intervals), level by level, with sets: no Morton runs, no compiled code.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.online.guided.local_mass import locally_placed
from dpsynth.online.summary import Summary
from tests.support.densities import random_morton_partition

DEPTH = 12


def _cells(depths: np.ndarray, prefixes: np.ndarray) -> list[tuple[int, int]]:
    """Each leaf as [first, end) of finest cells at DEPTH."""
    return [(int(p) << (DEPTH - int(k)), (int(p) + 1) << (DEPTH - int(k)))
            for k, p in zip(depths, prefixes, strict=True)]


def _oracle(depths: np.ndarray, prefixes: np.ndarray, raw: np.ndarray, floor: float
            ) -> np.ndarray:
    cells = _cells(depths, prefixes)
    kept = [c > floor for c in raw]
    out = [float(c) if k else 0.0 for c, k in zip(raw, kept, strict=True)]
    pending = {j for j, k in enumerate(kept) if not k and raw[j] != 0}
    for level in range(int(depths.max()), -1, -1):
        width = 1 << (DEPTH - level)
        groups: dict[int, list[int]] = {}
        for j, (lo, hi) in enumerate(cells):
            if hi - lo <= width:  # inside one cell of this level
                groups.setdefault(lo // width, []).append(j)
        for members in groups.values():
            keep = [j for j in members if kept[j]]
            total = sum(out[j] for j in keep)
            if keep and total > 0:
                extra = sum(float(raw[j]) for j in members if j in pending)
                for j in keep:
                    out[j] *= max(total + extra, 0.0) / total
                pending -= set(members)
    return np.array(out)


def _random_summary(seed: int) -> Summary:
    rng = np.random.default_rng(seed)
    depths, prefixes = random_morton_partition(rng, DEPTH)
    counts = rng.integers(-6, 12, depths.size) * (rng.random(depths.size) < 0.8)
    counts[rng.integers(depths.size)] = 20  # at least one kept leaf
    return Summary(depths, prefixes, counts.astype(np.int64), float(max(counts.sum(), 1)),
                   floor=4.0, scale=2.0)


@pytest.mark.parametrize("seed", range(40))
def test_every_dropped_leaf_goes_to_its_nearest_ancestor_with_a_kept_leaf(seed: int) -> None:
    s = _random_summary(seed)
    got = locally_placed(s)
    want = _oracle(s.depths, s.prefixes, s.counts, 4.0)
    assert np.allclose(got.counts, want, rtol=1e-12, atol=1e-9)
    assert got.floor == 0.0 and got.size == s.size and got.scale == s.scale
    assert (got.counts[s.counts <= 4] == 0).all()


@pytest.mark.parametrize("seed", range(20))
def test_mass_is_conserved_unless_a_region_is_clipped_at_zero(seed: int) -> None:
    s = _random_summary(seed)
    out = locally_placed(s).counts
    kept = s.counts > 4
    if (out[kept] > 0).all():  # no region's total was clipped
        assert out.sum() == pytest.approx(float(s.counts.sum()))
    else:
        assert out.sum() >= float(s.counts.sum()) - 1e-9  # clipping only adds mass


def test_a_dropped_leaf_goes_to_the_nearest_kept_leaf_not_the_largest() -> None:
    # depth-2 leaves 0, 1 (siblings) and the depth-1 leaf 1: leaf 1's +3 goes to leaf 0 (5),
    # not in proportion to 5 : 100 over both kept leaves
    s = Summary(np.array([2, 2, 1]), np.array([0, 1, 1], np.uint64),
                np.array([5, 3, 100]), 108.0, floor=4.0, scale=2.0)
    assert locally_placed(s).counts.tolist() == [8.0, 0.0, 100.0]


def test_the_floors_zeroed_counts_are_read_and_placed() -> None:
    # leaves 0..3 at depth 2: leaf 1 was zeroed by the floors (its noisy count −3 kept aside)
    s = Summary(np.array([2, 2, 2, 2]), np.array([0, 1, 2, 3], np.uint64),
                np.array([9, 0, 2, 6]), 17.0, floor=4.0, scale=2.0,
                dropped=np.array([1]), dropped_counts=np.array([-3]))
    assert locally_placed(s).counts.tolist() == [6.0, 0.0, 0.0, 8.0]


def test_a_region_whose_dropped_noise_outweighs_its_kept_leaf_is_emptied() -> None:
    s = Summary(np.array([2, 2, 1]), np.array([0, 1, 1], np.uint64),
                np.array([5, -7, 30]), 28.0, floor=4.0, scale=2.0)
    assert locally_placed(s).counts.tolist() == [0.0, 0.0, 30.0]


@pytest.mark.parametrize("counts", [[9, 8, 7, 6], [1, 0, -2, 3]])
def test_all_kept_or_none_kept_is_left_as_it_is(counts: list[int]) -> None:
    s = Summary(np.array([2, 2, 2, 2]), np.array([0, 1, 2, 3], np.uint64),
                np.array(counts), 30.0, floor=4.0, scale=2.0)
    assert locally_placed(s) is s
    unfloored = Summary(s.depths, s.prefixes, np.array([9, -3, 2, 6]), 30.0)
    assert locally_placed(unfloored) is unfloored  # no floor: nothing is dropped
