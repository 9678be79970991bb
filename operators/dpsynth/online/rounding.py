"""Releases of step blocks: pooled piecewise-constant densities and systematic rounding.

Layer: core, post-processing only (privacy: P6, P9). The completed blocks' leaves (each block's
leaves partition the cube) are merged into Morton intervals at a common depth D; the pooled
density is rounded to integer cell counts by systematic sampling with a *public* uniform.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth._types import CellIds, Counts
from dpsynth.noise import KeyedNoise
from dpsynth.online.summary import Summary

Floats = NDArray[np.float64]


@njit(cache=True)
def _append(cells: Counts, values: Counts, n: int, cell: np.int64, count: int | np.int64) -> int:
    """Add ``count`` units to ``cell`` in the runs (merged with the last run if it is that cell)."""
    if n > 0 and cells[n - 1] == cell:
        values[n - 1] += count
        return n
    if n >= cells.shape[0]:  # memory safety: compiled code does not check bounds
        raise IndexError("systematic_runs: the runs buffers are smaller than runs_capacity")
    cells[n] = cell
    values[n] = count
    return n + 1


@njit(cache=True)
def systematic_runs(starts, widths, before, rate, total, u, cells, values):  # untyped: [tool.mypy]
    """Unit j = 1..total lands in the cell where F crosses j − u (F linear inside an interval,
    slope ``rate`` per cell, F = ``before`` at each interval's start).

    Interval i receives the units j with ⌊F_i + u⌋ < j ≤ ⌊F_{i+1} + u⌋; they are placed one by
    one where an interval has fewer units than cells, and cell by cell (⌊F + u⌋ at each cell's
    end) where it has more — O(Σ min(units, cells)), never a pass per unit of a dense region.
    The cells of successive units never decrease, so the result is written as runs: the
    occupied cells in ascending order (``cells``) and their counts (``values``); returns how
    many. The dense counts are ``zeros(2^D)`` with ``[cells] = values``.
    """
    intervals = starts.shape[0]
    placed = np.int64(0)  # units j ≤ placed are in earlier intervals
    n = 0
    for i in range(intervals):
        end = total if i == intervals - 1 else min(np.int64(np.floor(before[i + 1] + u)), total)
        if end <= placed:
            continue
        step = rate[i] if rate[i] > 1e-300 else 1e-300
        width = widths[i]
        if end - placed < width:  # sparse: unit by unit
            for j in range(placed + 1, end + 1):
                offset = np.int64(np.ceil((j - u - before[i]) / step)) - 1
                offset = min(max(offset, 0), width - 1)
                n = _append(cells, values, n, starts[i] + offset, 1)
        else:  # dense: cell by cell
            previous = placed
            for offset in range(width):
                current = end if offset == width - 1 else min(
                    max(np.int64(np.floor(before[i] + step * (offset + 1) + u)), previous), end)
                if current > previous:
                    n = _append(cells, values, n, starts[i] + offset, current - previous)
                previous = current
        placed = end
    return n


@njit(cache=True)
def runs_capacity(widths: np.ndarray, before: np.ndarray, total: int) -> np.int64:
    """An upper bound on the runs :func:`systematic_runs` writes: interval i receives at most
    ⌊F_{i+1} − F_i⌋ + 1 units (one more for rounding of F) and occupies at most min(units,
    width) cells. Within about two runs per interval of the count, so the buffers are kept
    as they are instead of copied (at t = 10⁶ a copy of the ≈ 1.4·10⁵ runs cost a third of
    the pass). Compiled; the terms are whole numbers, so their sum is exact in any order."""
    bound = 0.0
    for i in range(before.size):
        span = (before[i + 1] if i + 1 < before.size else float(total)) - before[i]
        bound += min(float(widths[i]), np.floor(max(span, 0.0)) + 2.0)
    return np.int64(min(float(total), bound))


@njit(cache=True)
def _scaled_before(mass: Floats, scale: float) -> Floats:
    """F at interval starts: scale · Σ_{j<i} mass_j, summed in order (as ``np.cumsum``)."""
    before, running = np.empty(mass.size, np.float64), 0.0
    for i in range(mass.size):
        before[i] = running * scale
        running += mass[i]
    return before


_ORIGIN = np.zeros(1, np.uint64)  # the rounding's one address (stream 0, event 0), pre-typed


@lru_cache(maxsize=16)
def _placement_noise(placement_seed: bytes) -> KeyedNoise:
    """The rounding's public noise source for one placement seed (built once, not per release)."""
    return KeyedNoise(placement_seed)


def round_density(starts: np.ndarray, widths: np.ndarray, density: np.ndarray, depth: int,
                  total: int, placement_seed: bytes, step: int
                  ) -> tuple[int, np.ndarray, np.ndarray]:
    """(depth, cells, counts): the integer counts, summing to ``total``, of the 2^depth cells
    under a piecewise-constant density on Morton intervals, as runs (occupied cells ascending,
    counts; :func:`systematic_runs`): its cumulative mass F, scaled to ``total``, rounded by
    systematic sampling — unit j = 1..total lands where F crosses j − u, with u a *public*
    uniform keyed by the placement seed and the step (post-processing, P6). An empty density
    puts every unit in the one cell of depth 0."""
    mass = density * widths
    mass_sum = mass.sum()
    if mass_sum <= 0:
        return 0, np.zeros(1, np.int64), np.array([total], np.int64)
    scale = total / mass_sum
    before = _scaled_before(mass, scale)  # F at interval starts
    u = _placement_noise(placement_seed).uniform_at(("round", step), _ORIGIN, 0)[0] - 2.0**-53
    capacity = runs_capacity(widths, before, total)
    cells, values = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
    n = systematic_runs(starts, widths, before, density * scale, total, u, cells, values)
    if 4 * n < capacity:  # a kept release should not hold a large buffer for a few runs
        return depth, cells[:n].copy(), values[:n].copy()
    return depth, cells[:n], values[:n]  # views of buffers at most 4× the runs


def sorted_union(*arrays: np.ndarray) -> np.ndarray:
    """The sorted distinct values of the arrays (``np.unique`` of their concatenation; a stable
    sort merges sorted runs, many times faster than ``np.unique`` on these sizes; integers
    in a range no wider than 8 values per input value are marked in a table instead)."""
    values = np.concatenate(arrays)
    if values.dtype == np.int64 and 0 < values.size and 0 <= values.min() and \
            values.max() < 8 * values.size:
        return _marked(values)
    values = np.sort(values, kind="stable")
    keep = np.ones(values.size, bool)
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


@njit(cache=True)
def _marked(values: Counts) -> Counts:
    """The sorted distinct values of non-negative integers, by a table of their range."""
    seen = np.zeros(values.max() + 1, np.bool_)
    for v in values:
        seen[v] = True
    return np.flatnonzero(seen).astype(np.int64)


def block_intervals(block: Summary, depth: int,
                     floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A block's leaves as sorted Morton interval starts at ``depth`` and per-cell densities.

    Leaves deeper than ``depth`` (stragglers, :func:`mass_depth`) are merged into their
    depth-``depth`` ancestor, their mass spread over it. Adjacent empty intervals (leaves at or
    below the floor) are one interval: the same density, but every release, guide and fold
    walks fewer intervals — at large ε most leaves of a summary are empty (a record's path to
    the maximal depth leaves an empty sibling per level). Post-processing (privacy: P6).
    """
    raw = block.counts
    floor = float(block.floor if block.floor is not None else floor)  # a summary's own floor
    depths = np.asarray(block.depths, np.int64)
    prefixes = np.asarray(block.prefixes, np.uint64)
    size = max(float(block.size), 0.0)
    starts, increasing = _leaf_starts(depths, prefixes, depth)
    if increasing and raw.dtype == np.int64:  # whole counts: exact sums, so one compiled pass
        return _without_empty_runs(starts, _whole_densities(raw, floor, size, starts, depth))
    counts = np.where(raw > floor, raw, 0).astype(np.float64)  # floor 0: clip negatives
    if counts.sum() > 0:  # clipped histogram scaled to the block's size estimate
        counts *= size / counts.sum()
    if increasing:  # Morton order, none merged (guided's leaves): each its own interval
        mass: np.ndarray = counts
    elif (starts[1:] >= starts[:-1]).all():  # leaves in Morton order: runs
        first = np.flatnonzero(np.concatenate([[True], starts[1:] != starts[:-1]]))
        starts, mass = starts[first], np.add.reduceat(counts, first)
    else:
        starts, inverse = np.unique(starts, return_inverse=True)
        mass = np.bincount(inverse, weights=counts, minlength=starts.size)
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    return _without_empty_runs(starts, mass / widths)


def _without_empty_runs(starts: np.ndarray, density: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same piecewise-constant density with each run of empty intervals as one interval
    (sums over the density are the same in exact arithmetic; a float sum across a removed
    boundary may round once instead of twice)."""
    empty = density == 0
    keep = np.ones(starts.size, bool)
    np.logical_not(empty[1:] & empty[:-1], out=keep[1:])
    if keep.all():
        return starts, density
    return starts[keep], density[keep]


@njit(cache=True)
def _leaf_starts(depths: Counts, prefixes: CellIds, depth: int) -> tuple[Counts, bool]:
    """(each leaf's first cell at ``depth``, deeper leaves cut there; are they increasing)."""
    starts = np.empty(depths.size, np.int64)
    increasing = True
    for j in range(depths.size):
        k = min(depths[j], depth)
        cut = prefixes[j] >> np.uint64(depths[j] - k)
        starts[j] = np.int64(cut << np.uint64(depth - k))
        increasing = increasing and (j == 0 or starts[j] > starts[j - 1])
    return starts, increasing


@njit(cache=True)
def _whole_densities(raw: Counts, floor: float, size: float, starts: Counts,
                     depth: int) -> Floats:
    """:func:`block_intervals`' densities of integer counts on leaves that need no merge
    (``starts`` increasing): the float sum of whole counts is exact, the rest elementwise, so
    the same bytes as the numpy pass."""
    counts = np.empty(raw.size, np.float64)
    total = 0.0
    for j in range(raw.size):
        counts[j] = float(raw[j]) if raw[j] > floor else 0.0
        total += counts[j]
    factor = size / total if total > 0 else 1.0
    for j in range(raw.size):
        end = starts[j + 1] if j + 1 < raw.size else np.int64(1) << np.int64(depth)
        counts[j] = (counts[j] * factor if total > 0 else counts[j]) / float(end - starts[j])
    return counts


def mass_depth(block: Summary, share: float = 1e-3) -> int:
    """The smallest depth below which the block's leaves hold at most ``share`` of its mass.

    PrivTree leaves far below the data are stragglers of empty regions whose counts are
    noise; their (tiny) mass is kept but spread over their ancestor at the returned depth, so
    a stray deep leaf does not force a 2^20-cell release. Leaves with real mass (a dense venue)
    hold far more than 0.1 % and keep their depth.
    """
    counts = np.asarray(block.counts)
    if counts.dtype.kind in "iu":  # whole counts: exact sums in one compiled pass
        return int(_integer_mass_depth(counts.astype(np.int64), block.depths, share))
    mass = np.maximum(counts, 0).astype(np.float64)
    total = mass.sum()
    if total <= 0:
        return 0
    by_depth = np.bincount(block.depths, weights=mass)
    deeper = total - np.cumsum(by_depth)  # mass strictly below each depth
    return int(np.flatnonzero(deeper <= share * total)[0])


@njit(cache=True)
def _integer_mass_depth(counts: Counts, depths: Counts, share: float) -> int:
    """:func:`mass_depth` of integer counts (the same comparisons, on exact integer sums)."""
    by_depth = np.zeros(depths.max() + 1 if depths.size else 1, np.int64)
    total = 0
    for i in range(counts.size):
        if counts[i] > 0:
            by_depth[depths[i]] += counts[i]
            total += counts[i]
    if total <= 0:
        return 0
    above = 0  # mass at depths ≤ k
    for k in range(by_depth.size):
        above += by_depth[k]
        if float(total - above) <= share * float(total):
            return k
    return by_depth.size - 1


def pooled_intervals(
    blocks: list[Summary], max_depth: int, floor: float = 0.0, depth: int | None = None
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(D, union interval starts, widths, pooled density, last block's density) at depth D (by
    default the deepest :func:`mass_depth`, at most ``max_depth``).

    Every block's leaves partition the cube, so each union interval lies in exactly one leaf
    of every block: the pooled density is the sum of those leaves' densities.
    """
    if depth is None:
        depth = min(max_depth, max(mass_depth(blk) for blk in blocks))
    starts, widths, densities = union_grid([block_intervals(blk, depth, floor)
                                            for blk in blocks], depth)
    # a sum of arrays is an array (sum's 0 is for an empty list; blocks is never empty)
    return depth, starts, widths, sum(densities), densities[-1]  # type: ignore[return-value]


def union_grid(parts: list[tuple[np.ndarray, np.ndarray]], depth: int
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(union interval starts, widths, each part's density on them) of piecewise-constant
    densities at ``depth`` (interval starts, density per cell)."""
    if len(parts) == 1:  # its own grid (starts sorted and distinct)
        starts, density = parts[0]
        return starts, np.diff(np.concatenate([starts, [1 << depth]])), [density]
    starts = sorted_union(*(s for s, _ in parts))
    widths = np.diff(np.concatenate([starts, [1 << depth]]))
    return starts, widths, [density_at(s, dens, starts) for s, dens in parts]


def density_at(starts: np.ndarray, density: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A piecewise-constant density (interval ``starts``) read on a finer sorted ``grid``."""
    out: np.ndarray = np.asarray(density)[interval_of(starts, grid)]
    return out


def interval_of(starts: np.ndarray, points: np.ndarray) -> Counts:
    """The interval (sorted ``starts``) holding each of the sorted ``points``:
    ``np.searchsorted(starts, points, side="right") - 1`` in one compiled merged pass, not a
    binary search per point.

    >>> interval_of(np.array([0, 4, 6]), np.array([0, 3, 4, 7])).tolist()
    [0, 0, 1, 2]
    """
    out: Counts = _interval_of(np.asarray(starts, np.int64), np.asarray(points, np.int64))
    return out


@njit(cache=True)
def _interval_of(starts: Counts, points: Counts) -> Counts:
    out = np.empty(points.size, np.int64)
    i = -1
    for g in range(points.size):
        while i + 1 < starts.size and starts[i + 1] <= points[g]:
            i += 1
        out[g] = i
    return out


def fold_refined(shape: tuple[np.ndarray, np.ndarray], summary: Summary, depth: int,
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
    return _fold(np.asarray(shape[0], np.int64), np.asarray(shape[1], np.float64), leaf_starts,
                 leaf_density, np.asarray(reference[0], np.int64),
                 np.asarray(reference[1], np.float64), np.int64(1) << np.int64(depth))


@njit(cache=True)
def _fold(shape_starts: Counts, shape_density: Floats, leaf_starts: Counts,
          leaf_density: Floats, ref_starts: Counts, ref_density: Floats,
          end: np.int64) -> tuple[Counts, Floats]:
    """:func:`fold_refined` on sorted distinct interval starts, in one compiled pass: the union
    grid by a three-way merge, then each grid interval's shape, leaf and reference."""
    grid = np.empty(shape_starts.size + leaf_starts.size + ref_starts.size, np.int64)
    a = b = c = n = 0
    while a < shape_starts.size or b < leaf_starts.size or c < ref_starts.size:
        low = end
        if a < shape_starts.size:
            low = min(low, shape_starts[a])
        if b < leaf_starts.size:
            low = min(low, leaf_starts[b])
        if c < ref_starts.size:
            low = min(low, ref_starts[c])
        grid[n] = low
        n += 1
        if a < shape_starts.size and shape_starts[a] == low:
            a += 1
        if b < leaf_starts.size and leaf_starts[b] == low:
            b += 1
        if c < ref_starts.size and ref_starts[c] == low:
            c += 1
    grid = grid[:n]
    leaf = np.empty(n, np.int64)
    ref = np.empty(n, np.float64)
    out = np.empty(n, np.float64)
    inside = np.zeros(leaf_starts.size, np.float64)
    a = b = c = 0
    for g in range(n):
        while a + 1 < shape_starts.size and shape_starts[a + 1] <= grid[g]:
            a += 1
        while b + 1 < leaf_starts.size and leaf_starts[b + 1] <= grid[g]:
            b += 1
        while c + 1 < ref_starts.size and ref_starts[c + 1] <= grid[g]:
            c += 1
        width = (grid[g + 1] if g + 1 < n else end) - grid[g]
        leaf[g], ref[g], out[g] = b, ref_density[c], shape_density[a]
        inside[b] += ref[g] * width
    for g in range(n):
        i = leaf[g]
        if inside[i] > 0:
            width = (leaf_starts[i + 1] if i + 1 < leaf_starts.size else end) - leaf_starts[i]
            out[g] += leaf_density[i] * width * (ref[g] / inside[i])
        else:
            out[g] += leaf_density[i]
    return grid, out


def empty_shape() -> tuple[np.ndarray, np.ndarray]:
    """The zero density (one interval from 0)."""
    return np.zeros(1, np.int64), np.zeros(1)
