"""Random piecewise-constant densities and partitions on Morton intervals (test inputs)."""

from __future__ import annotations

import numpy as np

from dpsynth.tree import leaf_bounds, route


def random_density(rng: np.random.Generator, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to 40 intervals at ``depth`` (the first at 0), densities over five decades, 30 % zero."""
    k = int(rng.integers(1, min(40, 1 << depth) + 1))
    starts = np.sort(rng.choice(1 << depth, k, replace=False)).astype(np.int64)
    starts[0] = 0
    density = rng.exponential(1.0, k) * (rng.random(k) < 0.7) * 10 ** rng.uniform(-3, 2)
    return starts, density


def random_morton_partition(rng: np.random.Generator,
                            max_depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Leaves (depths, prefixes) of a random binary partition, depth first (Morton order)."""
    depths, prefixes, stack = [], [], [(0, 0)]
    while stack:
        k, prefix = stack.pop()
        if k < max_depth and rng.random() < 0.6 ** (k / 3):
            stack += [(k + 1, 2 * prefix + 1), (k + 1, 2 * prefix)]
        else:
            depths.append(k)
            prefixes.append(prefix)
    return np.array(depths, np.int64), np.array(prefixes, np.uint64)


def cell_mass(starts: np.ndarray, density: np.ndarray, depth: int, k: int, p: int) -> float:
    """Mass of the cell (depth k, Morton prefix p) under a piecewise-constant density on Morton
    intervals at ``depth`` (mass per depth-``depth`` cell): the cumulative mass is piecewise
    linear, so it is read by interpolation (independent of the compiled queries)."""
    bounds = np.concatenate([starts, [1 << depth]])
    cum = np.concatenate([[0.0], np.cumsum(density * np.diff(bounds))])
    lo, hi = np.interp([p * 2.0 ** (depth - k), (p + 1) * 2.0 ** (depth - k)], bounds, cum)
    return float(hi - lo)


def face_neighbours_by_geometry(k: int, p: int, d: int, axis: int, step: int) -> int | None:
    """The Morton prefix of the depth-k cell next to cell (k, p) along ``axis``, one cell up
    (``step`` 1) or down (−1), or None at the cube's edge: found geometrically, by routing the
    centre moved one side-length (independent of the bit arithmetic under test)."""
    lo, hi = leaf_bounds(np.array([p], np.uint64), d=d, depth=k)
    centre = (lo[0] + hi[0]) / 2
    centre[axis] += step * (hi[0][axis] - lo[0][axis])
    if not 0.0 < centre[axis] < 1.0:
        return None
    return int(route(centre[None, :], depth=k)[0])
