"""Post-processing of step-block releases: systematic rounding, folding, one EM step."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dpsynth.online.rounding import (
    block_intervals,
    density_at,
    empty_shape,
    fold_refined,
    interval_of,
    mass_depth,
    runs_capacity,
    sorted_union,
    systematic_runs,
)
from dpsynth.online.summary import Summary
from tests.support.densities import random_density, random_morton_partition


def _unit_by_unit(starts, widths, before, rate, total, u) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The definition: unit j = 1..total lands in the cell where F crosses j − u."""
    out = np.zeros(int(starts[-1] + widths[-1]), np.int64)
    i = 0
    for j in range(1, total + 1):
        target = j - u
        while i < starts.size - 1 and before[i + 1] < target:
            i += 1
        offset = int(np.ceil((target - before[i]) / max(rate[i], 1e-300))) - 1
        out[starts[i] + min(max(offset, 0), widths[i] - 1)] += 1
    return out


def test_systematic_runs_place_every_unit_where_the_definition_does() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        depth = int(rng.integers(1, 12))
        starts, density = random_density(rng, depth)
        if density.sum() == 0:
            density[0] = 1.0
        widths = np.diff(np.concatenate([starts, [1 << depth]]))
        total = int(rng.integers(0, 3000))
        scale = total / (density * widths).sum()
        before = np.concatenate([[0.0], np.cumsum(density * widths)[:-1]]) * scale
        u = float(rng.random())
        capacity = runs_capacity(widths, before, total)
        cells, values = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        n = systematic_runs(starts, widths, before, density * scale, total, u, cells, values)
        assert n <= capacity <= max(n, 0) + 2 * starts.size  # a bound, and a tight one
        if n:  # one run short: refused, never written out of bounds
            with pytest.raises(IndexError, match="runs_capacity"):
                systematic_runs(starts, widths, before, density * scale, total, u,
                                np.empty(n - 1, np.int64), np.empty(n - 1, np.int64))
        assert (np.diff(cells[:n]) > 0).all() and (values[:n] > 0).all()  # runs, ascending
        got = np.zeros(1 << depth, np.int64)
        got[cells[:n]] = values[:n]
        assert got.sum() == total
        assert (got == _unit_by_unit(starts, widths, before, density * scale, total, u)).all()


def _fold_reference(shape, summary_starts, summary_density, depth, reference):  # type: ignore[no-untyped-def]
    starts = sorted_union(shape[0], summary_starts, reference[0])
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    ref = density_at(*reference, starts)
    leaf = np.searchsorted(summary_starts, starts, side="right") - 1
    leaf_width = np.diff(np.concatenate([summary_starts, [1 << depth]]))
    inside = np.bincount(leaf, weights=ref * widths, minlength=summary_starts.size)[leaf]
    leaf_mass = (summary_density * leaf_width)[leaf]
    spread = np.divide(ref, inside, out=np.zeros(starts.size), where=inside > 0)
    added = np.where(inside > 0, leaf_mass * spread, summary_density[leaf])
    return starts, density_at(*shape, starts) + added


def test_fold_spreads_each_leaf_like_the_reference_exactly_as_specified() -> None:
    rng = np.random.default_rng(1)
    depth = 10
    for _ in range(200):
        shape = random_density(rng, depth) if rng.random() < 0.7 else empty_shape()
        reference = random_density(rng, depth)
        leaf_starts, leaf_density = random_density(rng, depth)
        leaf_depths = np.full(leaf_starts.size, depth, np.int64)
        summary = Summary(leaf_depths, leaf_starts.astype(np.uint64), leaf_density,
                          float(leaf_density.sum()))
        got = fold_refined(shape, summary, depth, reference)
        want = _fold_reference(shape, *block_intervals(summary, depth), depth, reference)
        assert (got[0] == want[0]).all()
        np.testing.assert_array_equal(got[1], want[1])  # same arithmetic, same bits


def test_sorted_union_is_the_unique_of_the_concatenation_on_both_paths() -> None:
    """Small non-negative int64 ranges are marked in a table, anything else sorted: the same
    array either way (dtype included)."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        span = int(rng.choice([4, 64, 1 << 12, 1 << 40]))
        dtype = np.int64 if rng.random() < 0.8 else np.uint64
        arrays = [np.unique(rng.integers(0, span, int(rng.integers(1, 50)))).astype(dtype)
                  for _ in range(int(rng.integers(1, 6)))]
        got, want = sorted_union(*arrays), np.unique(np.concatenate(arrays))
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_mass_depth_of_integer_counts_matches_the_float_definition() -> None:
    """Whole counts take a compiled pass; it must pick the depth the float sums pick."""
    rng = np.random.default_rng(12)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        counts = rng.integers(-5, 50, n) * (rng.random(n) < 0.8)
        counts[rng.random(n) < 0.05] = int(rng.integers(1000, 10**6))
        depths = rng.integers(0, 30, n)
        cells = np.zeros(n, np.uint64)  # mass_depth reads depths and counts only
        assert mass_depth(Summary(depths, cells, counts, 0.0)) == mass_depth(
            Summary(depths, cells, counts.astype(np.float64), 0.0))


def test_block_intervals_of_whole_counts_match_the_float_path() -> None:
    """Integer counts take a compiled pass (when no leaf is cut): the same bytes as the numpy
    pass over the same counts as floats, at depths that cut leaves and depths that do not."""
    rng = np.random.default_rng(13)
    for _ in range(300):
        depths, prefixes = random_morton_partition(rng, 16)
        counts = rng.integers(-3, 40, depths.size)
        block = Summary(depths, prefixes, counts, float(rng.uniform(-5, 500)),
                        floor=float(rng.choice([0.0, 1.0, 2.5])))
        for depth in (int(depths.max()), int(rng.integers(0, 17))):
            got = block_intervals(block, depth)
            want = block_intervals(replace(block, counts=counts.astype(np.float64)), depth)
            assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()


def test_block_intervals_merge_empty_runs_into_the_same_density() -> None:
    """Adjacent empty leaves are one interval: every cell at ``depth`` has the same density as
    with one interval per leaf (computed here from the leaves), no two adjacent intervals are
    both empty, and every nonempty leaf keeps its own start."""
    rng = np.random.default_rng(14)
    for _ in range(300):
        depths, prefixes = random_morton_partition(rng, 12)
        counts = rng.integers(-3, 20, depths.size) * (rng.random(depths.size) < 0.4)
        floor = float(rng.choice([0.0, 1.0, 2.5]))
        size = float(rng.uniform(1, 500))
        block = Summary(depths, prefixes, counts, size, floor=floor)
        depth = int(depths.max())
        starts, density = block_intervals(block, depth)
        leaf_starts = (prefixes << (depth - depths).astype(np.uint64)).astype(np.int64)
        widths = np.diff(np.concatenate([leaf_starts, [1 << depth]]))
        kept = np.where(counts > floor, counts, 0).astype(np.float64)
        if kept.sum() > 0:
            kept *= size / kept.sum()
        cells = np.arange(1 << depth)
        want = density_at(leaf_starts, kept / widths, cells)
        assert np.array_equal(density_at(starts, density, cells), want)
        assert not np.any((density[1:] == 0) & (density[:-1] == 0))
        assert set(leaf_starts[kept > 0].tolist()) <= set(starts.tolist())


def test_interval_of_is_searchsorted_right_minus_one() -> None:
    """The merged look-up against numpy on random sorted inputs, points below the first start
    (-1, as numpy) and repeated points included."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        starts = np.unique(rng.integers(0, 1000, int(rng.integers(1, 60))))
        points = np.sort(rng.integers(-5, 1005, int(rng.integers(0, 200))))
        want = np.searchsorted(starts, points, side="right") - 1
        assert interval_of(starts, points).tolist() == want.tolist()
