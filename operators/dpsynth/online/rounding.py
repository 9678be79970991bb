"""Releases of step blocks: pooled piecewise-constant densities and systematic rounding.

Layer: core, post-processing only (privacy: P6, P9). The completed blocks' leaves (each block's
leaves partition the cube) are merged into Morton intervals at a common depth D; the pooled
density is rounded to integer cell counts by systematic sampling with a *public* uniform.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit


@njit(cache=True)
def systematic_runs(starts, widths, before, rate, total, u, cells, values):  # type: ignore[no-untyped-def]
    """Unit j = 1..total lands in the cell where F crosses j − u (F linear inside an interval,
    slope ``rate`` per cell, F = ``before`` at each interval's start): one pass, O(total + K).

    The cells of successive units never decrease, so the result is written as runs: the
    occupied cells in ascending order (``cells``) and their counts (``values``); returns how
    many. The dense counts are ``zeros(2^D)`` with ``[cells] = values``.
    """
    i = 0
    n = 0
    last = starts.shape[0] - 1
    for j in range(1, total + 1):
        target = j - u
        while i < last and before[i + 1] < target:
            i += 1
        step = rate[i] if rate[i] > 1e-300 else 1e-300
        offset = np.int64(np.ceil((target - before[i]) / step)) - 1
        offset = min(max(offset, 0), widths[i] - 1)
        cell = starts[i] + offset
        if n > 0 and cells[n - 1] == cell:
            values[n - 1] += 1
        else:
            cells[n] = cell
            values[n] = 1
            n += 1
    return n


def sorted_union(*arrays: np.ndarray) -> np.ndarray:
    """The sorted distinct values of the arrays (``np.unique`` of their concatenation; a stable
    sort merges sorted runs, many times faster than ``np.unique`` on these sizes)."""
    values = np.sort(np.concatenate(arrays), kind="stable")
    keep = np.ones(values.size, bool)
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def block_intervals(block: dict[str, Any], depth: int,
                     floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A block's leaves as sorted Morton interval starts at ``depth`` and per-cell densities.

    Leaves deeper than ``depth`` (stragglers, :func:`mass_depth`) are merged into their
    depth-``depth`` ancestor, their mass spread over it.
    """
    raw = block["counts"]
    floor = float(block.get("floor", floor))  # step summaries carry their own noise floor
    counts = np.where(raw > floor, raw, 0).astype(np.float64)  # floor 0: clip negatives
    if counts.sum() > 0:  # clipped histogram scaled to the block's size estimate
        counts *= max(float(block["size"]), 0.0) / counts.sum()
    leaf_depths = np.minimum(block["depths"], depth)
    prefixes = block["prefixes"] >> (block["depths"] - leaf_depths).astype(np.uint64)
    starts = (prefixes << (depth - leaf_depths).astype(np.uint64)).astype(np.int64)
    starts, inverse = np.unique(starts, return_inverse=True)
    mass = np.bincount(inverse, weights=counts, minlength=starts.size)
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    return starts, mass / widths


def mass_depth(block: dict[str, Any], share: float = 1e-3) -> int:
    """The smallest depth below which the block's leaves hold at most ``share`` of its mass.

    PrivTree leaves far below the data are stragglers of empty regions whose counts are
    noise; their (tiny) mass is kept but spread over their ancestor at the returned depth, so
    a stray deep leaf does not force a 2^20-cell release. Leaves with real mass (a dense venue)
    hold far more than 0.1 % and keep their depth.
    """
    mass = np.maximum(block["counts"], 0).astype(np.float64)
    total = mass.sum()
    if total <= 0:
        return 0
    by_depth = np.bincount(block["depths"], weights=mass)
    deeper = total - np.cumsum(by_depth)  # mass strictly below each depth
    return int(np.flatnonzero(deeper <= share * total)[0])


def pooled_intervals(
    blocks: list[dict[str, Any]], max_depth: int, floor: float = 0.0, depth: int | None = None
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(D, union interval starts, widths, pooled density, last block's density) at depth D (by
    default the deepest :func:`mass_depth`, at most ``max_depth``).

    Every block's leaves partition the cube, so each union interval lies in exactly one leaf
    of every block: the pooled density is the sum of those leaves' densities.
    """
    if depth is None:
        depth = min(max_depth, max(mass_depth(blk) for blk in blocks))
    per_block = [block_intervals(blk, depth, floor) for blk in blocks]
    starts = sorted_union(*(s for s, _ in per_block))
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    densities = [density_at(s, dens, starts) for s, dens in per_block]
    return depth, starts, widths, sum(densities), densities[-1]


def density_at(starts: np.ndarray, density: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A piecewise-constant density (interval ``starts``) read on a finer ``grid``."""
    return density[np.searchsorted(starts, grid, side="right") - 1]


def fold_refined(shape: tuple[np.ndarray, np.ndarray], summary: dict[str, Any], depth: int,
                 reference: tuple[np.ndarray, np.ndarray],
                 floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Add one summary to an accumulated shape (interval starts, density at ``depth``): each
    of its leaves' mass spread inside the leaf like ``reference`` (uniformly where the
    reference has no mass in that leaf).

    The open block's step summaries are fresh but coarse; the latest block is fine but may be
    stale. This keeps the fresh mass of every coarse region (so drift moves the release) and
    borrows the fine detail inside it (so a stable stream keeps its venues). Post-processing;
    O(intervals) per summary, so a release never revisits the steps already folded.
    """
    leaf_starts, leaf_density = block_intervals(summary, depth, floor)
    starts = sorted_union(shape[0], leaf_starts, reference[0])
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    ref = density_at(*reference, starts)
    leaf = np.searchsorted(leaf_starts, starts, side="right") - 1
    leaf_width = np.diff(np.concatenate([leaf_starts, [1 << depth]]))
    inside = np.bincount(leaf, weights=ref * widths, minlength=leaf_starts.size)[leaf]
    leaf_mass = (leaf_density * leaf_width)[leaf]
    spread = np.divide(ref, inside, out=np.zeros(starts.size), where=inside > 0)
    added = np.where(inside > 0, leaf_mass * spread, leaf_density[leaf])
    return starts, density_at(*shape, starts) + added


def empty_shape() -> tuple[np.ndarray, np.ndarray]:
    """The zero density (one interval from 0)."""
    return np.zeros(1, np.int64), np.zeros(1)
