"""EM steps for a common density behind several histograms (guided releases, issue 14).

Layer: core, post-processing only (privacy: P6). Each part is a piecewise-constant density on
Morton intervals at a common depth D that partitions the cube (a released summary); a step
spreads every part's mass inside each of its intervals like the current estimate — the sum of
all parts at first, then the previous step's result (Dempster, Laird and Rubin 1977, for data
grouped into intervals; :data:`EM_STEPS` of them per release). Parts that do not change between
releases (the closed blocks) are stacked and summed once (:func:`stacked_parts`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dpsynth._types import Counts
from dpsynth.online.rounding import Floats, density_at, sorted_union

#: EM steps of a release: the second spreads every part like the first step's estimate, in
#: which one part's coarse leaves no longer dilute the others' fine structure (docs/decisions/0010).
EM_STEPS = 2

#: :func:`stacked_parts`: (union grid, interval starts, densities, sizes, summed density).
StackedParts = tuple[np.ndarray, np.ndarray, np.ndarray, list[int], np.ndarray]


def stacked_parts(parts: list[tuple[np.ndarray, np.ndarray]]) -> StackedParts:
    """``parts`` (interval starts, density) laid end to end, with their union grid and their sum
    on it, for :func:`em_density` (a caller keeps it for parts that do not change)."""
    grid, starts, density, offsets = _stacked(parts)
    pooled = np.zeros(grid.size)
    _add_parts(grid, starts, density, offsets, 0, pooled)
    return grid, starts, density, np.diff(offsets).tolist(), pooled


def _stacked(parts: list[tuple[np.ndarray, np.ndarray]]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(union grid, interval starts, densities, offsets) of ``parts`` laid end to end: part p
    is ``[offsets[p], offsets[p + 1])``."""
    grid = sorted_union(*(starts for starts, _ in parts))
    starts = np.concatenate([np.asarray(st, np.int64) for st, _ in parts])
    density = np.concatenate([np.asarray(dn, np.float64) for _, dn in parts])
    return grid, starts, density, np.cumsum([0] + [st.size for st, _ in parts])


def split_sums(parts: list[tuple[np.ndarray, np.ndarray]], split: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(union grid, the sum of ``parts[:split]``, the sum of ``parts[split:]``) of piecewise-
    constant densities (interval starts, density): one union and two compiled passes."""
    grid, starts, density, offsets = _stacked(parts)
    first, second = np.zeros(grid.size), np.zeros(grid.size)
    _add_parts(grid, starts, density, offsets[:split + 1], 0, first)
    _add_parts(grid, starts, density, offsets, split, second)
    return grid, first, second


class Pooled(NamedTuple):
    """Parts laid end to end on their union grid, with their sum: the first estimate of
    :func:`em_density`, which :func:`em_steps` refines."""

    grid: np.ndarray
    widths: np.ndarray
    starts: np.ndarray
    density: np.ndarray
    offsets: np.ndarray
    end: np.int64
    pooled: np.ndarray


def em_density(parts: list[tuple[np.ndarray, np.ndarray]], depth: int,
               before: StackedParts | None = None,
               scale: float = 1.0, steps: int = EM_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """(grid starts, density) of ``steps`` EM steps for a common density behind several
    histograms.

    ``parts`` are piecewise-constant densities (Morton interval starts at ``depth``, density per
    cell), each a partition of the cube. Their sum P is the first estimate; a step spreads each
    part's mass inside each of its intervals like the current estimate (uniformly where it has
    none there), so structure resolved by one part sharpens the coarse intervals of the others
    (Dempster, Laird and Rubin 1977, for data grouped into intervals), and the result is the
    next estimate. Post-processing; O(steps × parts × grid), in one compiled pass per part and
    step. ``before``: parts placed ahead of ``parts``, already
    :func:`stacked_parts` (the same result as listing them first; their sum is read, not redone).
    ``scale``: a factor on the densities of ``parts`` (not of ``before``).
    """
    return em_steps(pooled_parts(parts, depth, before, scale), steps)


def pooled_parts(parts: list[tuple[np.ndarray, np.ndarray]], depth: int,
                 before: StackedParts | None = None, scale: float = 1.0) -> Pooled:
    """The first estimate of :func:`em_density` (the parts' sum on their union grid), with
    what its steps read (same arguments)."""
    if before is None:
        before, parts = stacked_parts([(st, dn * scale) for st, dn in parts]), []
    grid, starts, density, sizes, pooled = before
    if parts:
        grid = sorted_union(grid, *(st for st, _ in parts))
        starts = np.concatenate([starts] + [np.asarray(st, np.int64) for st, _ in parts])
        density = np.concatenate([density, np.concatenate([dn for _, dn in parts]) * scale])
        sizes = sizes + [st.size for st, _ in parts]
    offsets = np.cumsum([0] + sizes)
    pooled = density_at(before[0], before[4], grid)  # the earlier parts' sum, in their order
    _add_parts(grid, starts, density, offsets, len(before[3]), pooled)
    end = np.int64(1) << np.int64(depth)
    widths = np.diff(np.append(grid, end)).astype(np.float64)  # the grid's cells, once per release
    return Pooled(grid, widths, starts, density, offsets, end, pooled)


def em_steps(pooled: Pooled, steps: int = EM_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """(grid starts, density) after ``steps`` EM steps from :func:`pooled_parts`' estimate."""
    estimate = pooled.pooled
    for _ in range(steps):
        estimate = _em_step(pooled.grid, pooled.widths, pooled.starts, pooled.density,
                            pooled.offsets, pooled.end, estimate)
    return pooled.grid, estimate


@njit(cache=True)
def _add_parts(grid: Counts, starts: Counts, density: Floats, offsets: Counts, first: int,
               pooled: Floats) -> None:
    """Add parts ``first``, ``first`` + 1, … (in that order) to ``pooled`` on the union grid."""
    for p in range(first, offsets.size - 1):
        i = offsets[p]
        for g in range(grid.size):
            while i + 1 < offsets[p + 1] and starts[i + 1] <= grid[g]:
                i += 1
            pooled[g] += density[i]


@njit(cache=True)
def _em_step(grid: Counts, widths: Floats, starts: Counts, density: Floats, offsets: Counts,
             end: np.int64, pooled: Floats) -> Floats:
    """:func:`em_density` on the union grid (cell ``widths``); part p is ``starts``/``density``
    in [offsets[p], offsets[p + 1]), its interval starts a sorted subset of ``grid``; ``pooled``
    the current estimate on the grid."""
    n = grid.size
    cum = np.zeros(n + 1, np.float64)
    for g in range(n):
        cum[g + 1] = cum[g] + pooled[g] * widths[g]
    out = np.zeros(n, np.float64)
    for p in range(offsets.size - 1):
        g = 0
        for i in range(offsets[p], offsets[p + 1]):
            first = g
            stop = starts[i + 1] if i + 1 < offsets[p + 1] else end
            while g < n and grid[g] < stop:
                g += 1
            inside = cum[g] - cum[first]  # the estimate's mass in this interval of the part
            if inside > 0:
                ratio = density[i] * (stop - starts[i]) / inside
                for k in range(first, g):
                    out[k] += pooled[k] * ratio
            else:
                for k in range(first, g):
                    out[k] += density[i]
    return out
