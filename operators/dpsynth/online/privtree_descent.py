"""The PrivTree descent: every split decision of one tree, level by level, in one compiled pass.

Layer: core (privacy: P10, P2c). Decision level i (tree depth k = i·stride) splits node v iff
b(v) + Z_v > θ, b(v) = max(c(v)·GRID − i·δ, θ − δ), in exact integers (:mod:`.privtree`). The
noise Z of a level is drawn one way or the other, by a function of ε_s only (public):

* *dense*: one exact Lap_Z draw per node, addressed (context + ("split",), prefix, k);
* *nonzero only* (:func:`descend_nonzero`, where P(Lap_Z ≠ 0) ≤ ¼): the level's nonzero values
  at (context + ("split", k, "nonzero"), j, ·), the j-th value the level's j-th node's in the
  descent's order — the same law (P2c). The compiled pass reads the level's nonzero draws with
  the sampler's kernel; in the rare case where double precision cannot decide a gap (about
  once in 10¹¹) it gives up and the tree is drawn again level by level in Python, through
  ``KeyedNoise.discrete_laplace_nonzero``, from the same addresses: the same leaves.

Leaves come out level by level, in the order of the active nodes (children in Morton order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth._types import CellIds, Counts
from dpsynth.noise import KeyedNoise, discrete_laplace_draw, effective_scale, nonzero_draws_into

#: Counts, θ and δ are compared in units of 1/GRID.
GRID = 64

Words = NDArray[np.uint64]


def biased_counts(counts: np.ndarray, depth: int, delta_units: int, theta_units: int) -> np.ndarray:
    """b(v)·GRID = max(c·GRID − k·δ, θ − δ) for nodes k decisions deep (Alg 1 line 4)."""
    c = np.asarray(counts, dtype=np.int64) * GRID
    return np.maximum(c - depth * delta_units, theta_units - delta_units)


def descend_dense(cells: CellIds, cum: Counts, params: Any, noise: KeyedNoise,
                  context: Sequence[int | str], address_depth: int
                  ) -> tuple[Counts, CellIds, Counts]:
    """The tree with one decision draw per node (the module docstring's dense form)."""
    sigma = effective_scale(params.scale_units)  # privacy: P2a (rounded up)
    depths, prefixes, counts, _ = _descend(
        noise.subkey((*context, "split")), np.zeros((0, 8), np.uint64),
        np.uint64(sigma.numerator), np.uint64(sigma.denominator), 0.0, 0.0, 0.0, cells, cum,
        address_depth, params.max_depth, params.stride, params.delta_units, params.theta_units)
    return depths, prefixes, counts


def descend_nonzero(cells: CellIds, cum: Counts, params: Any, noise: KeyedNoise,
                    context: Sequence[int | str], address_depth: int
                    ) -> tuple[Counts, CellIds, Counts]:
    """The tree with each level's nonzero decision noise only (the module docstring)."""
    levels = [(*context, "split", i * params.stride)
              for i in range(params.max_depth // params.stride)]
    keys, t, s, log_lo, log_hi, margin = noise.nonzero_plan(params.scale_units, levels)
    depths, prefixes, counts, decided = _descend(
        np.zeros(8, np.uint64), keys, np.uint64(t), np.uint64(s), log_lo, log_hi, margin, cells,
        cum, address_depth, params.max_depth, params.stride, params.delta_units,
        params.theta_units)
    if decided:
        return depths, prefixes, counts
    return _descend_levels(cells, cum, params, noise, context, address_depth)


def _descend_levels(cells: CellIds, cum: Counts, params: Any, noise: KeyedNoise,
                    context: Sequence[int | str], address_depth: int
                    ) -> tuple[Counts, CellIds, Counts]:
    """:func:`descend_nonzero` level by level in Python (every gap decided, the exact path
    included): the fallback of the compiled pass, from the same addresses."""
    depths: list[Counts] = []
    prefixes: list[CellIds] = []
    counts: list[Counts] = []
    stride, fanout = np.uint64(params.stride), np.arange(params.fanout, dtype=np.uint64)
    active = np.zeros(1, np.uint64)
    i = 0
    while active.size:
        k = i * params.stride
        shift = np.uint64(address_depth - k)
        count = (cum[np.searchsorted(cells, (active + np.uint64(1)) << shift)]
                 - cum[np.searchsorted(cells, active << shift)])
        if k == params.max_depth:  # forced leaves: no decision
            split = np.zeros(active.size, bool)
        else:
            b = biased_counts(count, i, params.delta_units, params.theta_units)
            at, z = noise.discrete_laplace_nonzero(params.scale_units, (*context, "split", k),
                                                   active.size)
            b[at] += z
            split = b > params.theta_units
        leaf = ~split
        depths.append(np.full(int(leaf.sum()), k, np.int64))
        prefixes.append(active[leaf])
        counts.append(count[leaf])
        active = ((active[split] << stride)[:, None] | fanout).reshape(-1)
        i += 1
    return np.concatenate(depths), np.concatenate(prefixes), np.concatenate(counts)


@njit(cache=True)
def _level_noise(key: Words, level_keys: Words, i: int, k: int, t: np.uint64, s: np.uint64,
                 log_lo: float, log_hi: float, margin: float, active: CellIds,
                 buf: Words) -> tuple[Counts, bool]:
    """The decision noise of level i's nodes: dense draws (``level_keys`` empty) or the
    level's nonzero draws; False when a gap needs the exact path."""
    z = np.zeros(active.size, np.int64)
    if level_keys.shape[0] == 0:
        for j in range(active.size):
            z[j] = discrete_laplace_draw(key, t, s, active[j], np.uint64(k), buf)
        return z, True
    at = np.empty(active.size, np.int64)
    values = np.empty(active.size, np.int64)
    none = np.empty(0, np.int64)
    n, ambiguous = nonzero_draws_into(level_keys[i], t, s, active.size, log_lo, log_hi, margin,
                                      none, none, at, values)
    if ambiguous >= 0:
        return z, False
    for q in range(n):
        z[at[q]] = values[q]
    return z, True


@njit(cache=True)
def _descend(key: Words, level_keys: Words, t: np.uint64, s: np.uint64, log_lo: float,
             log_hi: float, margin: float, cells: CellIds, cum: Counts, address_depth: int,
             max_depth: int, stride: int, delta_units: int,
             theta_units: int) -> tuple[Counts, CellIds, Counts, bool]:
    """Breadth-first PrivTree (module docstring): (depths, prefixes, true counts, decided).
    Shifts stay in uint64 (numba turns uint64-with-int64 into floats)."""
    buf = np.empty(16, np.uint64)
    fanout = 1 << stride
    leaf_depths = np.empty(64, np.int64)
    leaf_prefixes = np.empty(64, np.uint64)
    leaf_counts = np.empty(64, np.int64)
    leaves = 0
    active = np.zeros(1, np.uint64)
    i = 0
    while active.size > 0:
        k = i * stride
        need = leaves + active.size
        if need > leaf_depths.size:  # grow the output (amortised doubling)
            size = max(2 * leaf_depths.size, need)
            leaf_depths = np.concatenate((leaf_depths, np.empty(size - leaf_depths.size, np.int64)))
            leaf_prefixes = np.concatenate(
                (leaf_prefixes, np.empty(size - leaf_prefixes.size, np.uint64)))
            leaf_counts = np.concatenate((leaf_counts, np.empty(size - leaf_counts.size, np.int64)))
        shift = np.uint64(address_depth - k)
        count = np.empty(active.size, np.int64)
        for j in range(active.size):
            lo = np.searchsorted(cells, active[j] << shift)
            hi = np.searchsorted(cells, (active[j] + np.uint64(1)) << shift)
            count[j] = cum[hi] - cum[lo]
        if k == max_depth:  # forced leaves: no decision
            for j in range(active.size):
                leaf_depths[leaves] = k
                leaf_prefixes[leaves] = active[j]
                leaf_counts[leaves] = count[j]
                leaves += 1
            break
        z, decided = _level_noise(key, level_keys, i, k, t, s, log_lo, log_hi, margin, active,
                                  buf)
        if not decided:
            return leaf_depths[:0].copy(), leaf_prefixes[:0].copy(), leaf_counts[:0].copy(), False
        bias = np.int64(i) * np.int64(delta_units)
        children = np.empty(active.size * fanout, np.uint64)
        splits = 0
        for j in range(active.size):
            b = max(count[j] * GRID - bias, theta_units - delta_units)
            if b + z[j] > theta_units:
                first = active[j] << np.uint64(stride)
                for c in range(fanout):
                    children[splits * fanout + c] = first | np.uint64(c)
                splits += 1
            else:
                leaf_depths[leaves] = k
                leaf_prefixes[leaves] = active[j]
                leaf_counts[leaves] = count[j]
                leaves += 1
        active = children[:splits * fanout]
        i += 1
    return (leaf_depths[:leaves].copy(), leaf_prefixes[:leaves].copy(),
            leaf_counts[:leaves].copy(), True)
