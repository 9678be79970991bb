"""Tilted profiles inside a release's coarse cells (issue 31; docs/decisions/0012).

Layer: core, post-processing only (privacy: P6, P16). A guided release is a piecewise-constant
density on dyadic cells (after the EM steps, :mod:`dpsynth.online.guided.em`), and its points
fill each cell evenly. Where a coarse cell lies between a sparser and a denser face neighbour,
its records tend to sit on the denser side — a city's records just across a cell edge from it,
the flank of a cluster — and an even fill puts their mass at the cell's centre: a fixed offset
of the release mean, the same for every key. Here each such cell's mass keeps its
total and gets, per axis, an exponential profile e^(λu) from face to face whose end-to-end ratio
is that of the geometric face values √(ρ·ρ_lower) and √(ρ·ρ_upper): λ = ½ ln(ρ_upper / ρ_lower),
capped at ln :data:`TILT_MAX_RATIO` (ρ: mean densities of the cell and of its same-size face
neighbours). A cell that is not strictly between its two neighbours along an axis (a peak, a
valley, a flat run, the cube's edge) stays even along it. The profile is the product of the
axes' profiles, drawn on equal sub-cells (Morton order, so each is one interval): as many levels
per axis as the cell's width allows, up to :data:`TILT_BITS` bits, and as its steepest λ needs
(:data:`TILT_LEVEL_RATES`).

Privacy: a function of the released density alone (P6) — no record, draw or budget. It moves
points inside a cell, never mass between cells: counts, sizes and the number of points are
those of the density it is given.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from dpsynth._types import Counts
from dpsynth.online.guided.guide_mass import cumulative_mass, index_at, mass_between
from dpsynth.online.guided.partition import face_neighbour
from dpsynth.online.rounding import Floats, _interval_of

#: Morton bits of the sub-cells of a tilted cell: ``TILT_BITS // d`` levels per axis (64 sub-cells
#: at d = 1, 2 and 3), fewer where the cell is narrower (fewer levels left bias of the city edge
#: in the test's 16 keys; more changed nothing: docs/decisions/0012).
TILT_BITS = 6
#: Cap on a tilted profile's end-to-end density ratio (a cell next to an empty one): its mass then
#: lies mostly in the seventh of the cell nearest the denser face.
TILT_MAX_RATIO = 1000.0
#: A cell's sub-cell levels per axis grow with its steepest |λ|: one below the first rate, two
#: below the second, then three (a gentle profile is drawn as well by 2 slabs per axis as by 8,
#: and a release cuts fewer sub-cells; the bias test and W1 unchanged: docs/decisions/0012).
TILT_LEVEL_RATES = np.array([1.0, 3.0])
#: A cell is tilted only if its share of the release's mass times its ℓ∞ side is at least this:
#: below it no tilt can move the release's W1 by more than a few times it, and a fine release
#: (uniform data at ε = 100: 10⁵ intervals) would spend a third of its time on neighbours whose
#: profile is noise. Much higher, the city's edge cells drop out (docs/decisions/0012).
TILT_MIN_WEIGHT = 1e-4
#: Depth of the raster of search hints for the neighbours' intervals (4096 cells, built per
#: release in one merged pass, :func:`~dpsynth.online.rounding.interval_of`).
RASTER_DEPTH = 12


def tilted_density(starts: np.ndarray, density: np.ndarray, depth: int, d: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(interval starts, density) at ``depth``: ``starts``/``density`` (a piecewise-constant
    density on Morton intervals partitioning the cube) with each coarse cell that has a tilt
    (module docstring) cut into its sub-cells. Every cell keeps its mass; cells without a tilt,
    and intervals that are not dyadic cells, are returned as they are. Compiled: two passes."""
    starts = np.asarray(starts, np.int64)
    density = np.asarray(density, np.float64)
    if TILT_BITS // d == 0 or starts.size < 2:
        return starts, density
    levels, rates = _tilts(starts, density, depth, d, TILT_BITS // d, np.log(TILT_MAX_RATIO),
                           TILT_LEVEL_RATES, TILT_MIN_WEIGHT, min(depth, RASTER_DEPTH))
    if not levels.any():
        return starts, density
    return _cut(starts, density, depth, d, levels, rates, _slab_table(d, TILT_BITS // d))


@njit(cache=True)
def _log2(width: np.int64) -> np.int64:
    """log2 of a power of two."""
    shift = np.int64(0)
    while (np.int64(1) << (shift + 1)) <= width:
        shift += 1
    return shift


@njit(cache=True)
def _neighbour_density(starts: Counts, density: Floats, cum: Floats, raster: Counts,
                       below: int, prefix: np.uint64, shift: np.int64, depth: int, d: int,
                       axis: int, step: int) -> float:
    """The mean density of the cell next to cell ``prefix`` (of width 2^``shift``) along
    ``axis``, or −1 where there is none (the cube's edge); ``raster[c >> below]``: an
    interval at or before the one holding code c."""
    width = np.int64(1) << shift
    other, exists = face_neighbour(prefix, int(depth - shift), d, axis, step)
    if not exists:
        return -1.0
    first = np.int64(other) << shift
    i = index_at(starts, first, raster[first >> below])
    if i + 1 == starts.size or starts[i + 1] >= first + width:  # inside one interval
        return float(density[i])
    mass, _ = mass_between(starts, density, cum, first, first + width, i)
    return float(mass) / width


@njit(cache=True)
def _tilts(starts: Counts, density: Floats, depth: int, d: int, most: int, cap: float,
           level_rates: Floats, least_weight: float, coarse: int) -> tuple[Counts, Floats]:
    """Per interval: sub-cell levels per axis (0: left as it is) and λ per axis — ½ ln(ρ_upper /
    ρ_lower), capped, where the cell's density lies strictly between its face neighbours'
    (same-size cells) along the axis, else 0."""
    n = starts.size
    end = np.int64(1) << np.int64(depth)
    widths = np.empty(n, np.int64)
    widths[:-1] = starts[1:] - starts[:-1]
    widths[-1] = end - starts[-1]
    cum = cumulative_mass(starts, density, widths)
    least = least_weight * cum[n]  # a cell's mass × ℓ∞ side must be at least this
    below = depth - coarse  # search hints: the interval where each depth-``coarse`` cell begins
    raster = _interval_of(starts, np.arange(np.int64(1) << coarse) << below)
    levels = np.zeros(n, np.int64)
    rates = np.zeros((n, d))
    for i in range(n):
        width = widths[i]
        if density[i] <= 0 or width & (width - 1) != 0 or starts[i] & (width - 1) != 0:
            continue  # empty, or not a dyadic cell (a merged run)
        shift = _log2(width)
        level = min(int(shift) // d, most)  # as many sub-cell levels per axis as fit
        if level == 0 or density[i] * width * 0.5 ** ((depth - shift) // d) < least:
            continue  # too narrow, or too light and small to matter (TILT_MIN_WEIGHT)
        prefix = np.uint64(starts[i] >> shift)
        steepest = 0.0
        for axis in range(d):
            lower = _neighbour_density(starts, density, cum, raster, below, prefix, shift,
                                       depth, d, axis, -1)
            if lower < 0 or lower == density[i]:
                continue  # the cube's edge or a flat run: no tilt along this axis
            upper = _neighbour_density(starts, density, cum, raster, below, prefix, shift,
                                       depth, d, axis, 1)
            if upper >= 0 and (lower - density[i]) * (density[i] - upper) > 0:
                ratio = np.log(max(upper, 1e-300)) - np.log(max(lower, 1e-300))
                rates[i, axis] = min(max(0.5 * ratio, -cap), cap)
                steepest = max(steepest, abs(rates[i, axis]))
        if steepest > 0:  # a gentle profile needs fewer levels (TILT_LEVEL_RATES)
            need = 1
            for rate in level_rates:
                need += steepest >= rate
            levels[i] = min(level, need)
    return levels, rates


@lru_cache(maxsize=8)
def _slab_table(d: int, most: int) -> Counts:
    """:func:`_slab_of`, built once per (d, levels)."""
    table: Counts = _slab_of(d, most)
    return table


@njit(cache=True)
def _slab_of(d: int, most: int) -> Counts:
    """[first axis, level, sub-cell, axis] → the sub-cell's slab along the axis: sub-cell bit j
    (most significant first) is a digit of axis (first axis + j) mod d, as in
    :mod:`dpsynth.tree`."""
    out = np.zeros((d, most + 1, np.int64(1) << (d * most), d), np.int64)
    for first in range(d):
        for level in range(1, most + 1):
            bits = d * level
            for k in range(np.int64(1) << bits):
                for b in range(bits):
                    owner = (first + b) % d
                    out[first, level, k, owner] = 2 * out[first, level, k, owner] + (
                        (k >> (bits - 1 - b)) & 1)
    return out


@njit(cache=True)
def _cut(starts: Counts, density: Floats, depth: int, d: int, levels: Counts, rates: Floats,
         slab_of: Counts) -> tuple[Counts, Floats]:
    """Tilted cells replaced by their 2^(d·level) equal sub-intervals (Morton order), each with
    its mass share: the product over axes of the exponential profile's mass in its slab."""
    n = starts.size
    end = np.int64(1) << np.int64(depth)
    total = 0
    for i in range(n):
        total += np.int64(1) << (d * levels[i])
    out_starts = np.empty(total, np.int64)
    out_density = np.empty(total, np.float64)
    most = levels.max()
    shares = np.empty((d, np.int64(1) << most))  # a cell's mass share per slab, per axis
    j = 0
    for i in range(n):
        level = levels[i]
        if level == 0:
            out_starts[j], out_density[j] = starts[i], density[i]
            j += 1
            continue
        width = (starts[i + 1] if i + 1 < n else end) - starts[i]
        bits = d * level
        slabs = np.int64(1) << level
        for axis in range(d):  # shares of an exponential profile: geometric in the slab
            lam = rates[i, axis] / slabs
            shares[axis, 0] = 1.0 / slabs if lam == 0.0 else np.expm1(lam) / np.expm1(lam * slabs)
            growth = np.exp(lam)
            for k in range(1, slabs):
                shares[axis, k] = shares[axis, k - 1] * growth
        table = slab_of[(depth - _log2(width)) % d, level]
        for k in range(np.int64(1) << bits):
            share = 1.0
            for axis in range(d):
                share *= shares[axis, table[k, axis]]
            out_starts[j] = starts[i] + k * (width >> bits)
            out_density[j] = density[i] * (np.int64(1) << bits) * share  # ρ·w·share on w/parts
            j += 1
    return out_starts, out_density
