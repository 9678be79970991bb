"""Post-processing of step-block releases: systematic rounding, folding, one EM step."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.online.rounding import (
    block_intervals,
    density_at,
    em_density,
    empty_shape,
    fold_refined,
    runs_capacity,
    sorted_union,
    systematic_runs,
)


def _random_density(rng: np.random.Generator, depth: int) -> tuple[np.ndarray, np.ndarray]:
    k = int(rng.integers(1, min(40, 1 << depth) + 1))
    starts = np.sort(rng.choice(1 << depth, k, replace=False)).astype(np.int64)
    starts[0] = 0
    density = rng.exponential(1.0, k) * (rng.random(k) < 0.7) * 10 ** rng.uniform(-3, 2)
    return starts, density


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
        starts, density = _random_density(rng, depth)
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
        shape = _random_density(rng, depth) if rng.random() < 0.7 else empty_shape()
        reference = _random_density(rng, depth)
        leaf_starts, leaf_density = _random_density(rng, depth)
        leaf_depths = np.full(leaf_starts.size, depth, np.int64)
        summary = {"depths": leaf_depths, "prefixes": leaf_starts.astype(np.uint64),
                   "counts": leaf_density, "size": float(leaf_density.sum())}
        got = fold_refined(shape, summary, depth, reference)
        want = _fold_reference(shape, *block_intervals(summary, depth), depth, reference)
        assert (got[0] == want[0]).all()
        np.testing.assert_array_equal(got[1], want[1])  # same arithmetic, same bits


def test_em_step_keeps_each_parts_mass_in_each_of_its_intervals() -> None:
    """One EM step only moves mass *inside* the intervals of each part: a part's interval mass
    is preserved, so a fresh coarse summary still decides where its records are."""
    rng = np.random.default_rng(2)
    depth = 8
    parts = [_random_density(rng, depth) for _ in range(4)]
    for _, density in parts:
        density[0] += 1.0  # every part holds mass
    grid, density = em_density(parts, depth)
    widths = np.diff(np.concatenate([grid, [1 << depth]]))
    total = sum(float((d * np.diff(np.concatenate([s, [1 << depth]]))).sum()) for s, d in parts)
    assert (density * widths).sum() == pytest.approx(total)
    one = [parts[0]]
    g1, d1 = em_density(one, depth)  # a single part is its own fixed point
    np.testing.assert_allclose(density_at(g1, d1, parts[0][0]), parts[0][1])


def _em_reference(parts, depth):  # type: ignore[no-untyped-def]
    """One EM step by its definition, in numpy (the code before the compiled pass)."""
    grid = sorted_union(*(starts for starts, _ in parts))
    widths = np.diff(np.concatenate([grid, [1 << depth]]))
    pooled = sum(density_at(starts, density, grid) for starts, density in parts)
    cum = np.concatenate([[0.0], np.cumsum(pooled * widths)])
    out = np.zeros(grid.size)
    for starts, density in parts:
        first = np.searchsorted(grid, starts)
        last = np.concatenate([first[1:], [grid.size]])
        mass = density * np.diff(np.concatenate([starts, [1 << depth]]))
        inside = cum[last] - cum[first]
        leaf = np.searchsorted(starts, grid, side="right") - 1
        ratio = np.divide(mass, inside, out=np.zeros(mass.size), where=inside > 0)
        out += np.where(inside[leaf] > 0, pooled * ratio[leaf], density[leaf])
    return grid, out


def test_em_step_matches_its_definition() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        depth = int(rng.integers(1, 12))
        parts = [_random_density(rng, depth) for _ in range(int(rng.integers(1, 9)))]
        grid, density = em_density(parts, depth)
        want_grid, want = _em_reference(parts, depth)
        assert (grid == want_grid).all()
        np.testing.assert_allclose(density, want, rtol=1e-12, atol=1e-300)
