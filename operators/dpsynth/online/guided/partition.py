"""A partition chosen from a guide: Morton cells split while guide mass × diameter is large.

Layer: core. ``guided``'s summaries (:mod:`~dpsynth.online.guided`) are flat histograms on a
partition that is a deterministic function of summaries already released (the *guide*): a
cell v of depth k is split while its guide mass m(v) times its ℓ∞ diameter D_k = 2^−⌊k/d⌋
exceeds θ·E|Lap_Z(1/ε)| — m·D bounds the tree-W1 cost of spreading v's records uniformly over
v, and E|noise| is the cost of one more leaf. In d = 2, where the guide is dense, a cell split
along x is split along y too (:data:`WHOLE_SQUARE_DENSITY`); a cell next to a much denser one
is split too (:data:`HALO_RATIO`). No data, no noise: post-processing (P6, P16).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dpsynth._types import CellIds, Counts
from dpsynth.noise import discrete_laplace_mean_abs
from dpsynth.online.guided.guide_mass import cumulative_mass, mass_between
from dpsynth.online.rounding import Floats

#: θ: a cell is split while guide mass × ℓ∞ diameter > θ·E|leaf noise| (≈ θ/ε; tuned on the
#: moving blob, uniform data and Gowalla: docs/decisions/0003).
SPLIT_THRESHOLD = 0.5
#: A cell whose guide mass is below a quarter of a record is not split, whatever ε: at large ε
#: the leaf noise cost → 0 (:func:`split_threshold`) and the uniform prior would otherwise split
#: the whole cube to ``max_depth`` (split cells of one depth are disjoint, so at most 8 leaves per
#: record of guide mass at each depth; a threshold of one record held the error far above
#: PMM's at large ε).
MIN_SPLIT_MASS = 0.25
#: d = 2: a cell split along x alone (odd depth) whose guide density is at least this many
#: times the cube's average is split along y as well, whatever its mass. Splitting one axis
#: leaves D_k as it was, so the rule above often stops there, and the half-split leaf spreads
#: its records over the full height of the square; in dense regions, where mass is structured
#: at every scale, that cost more than the extra leaf; in regions of about average density a
#: half-split leaf is the better trade, and in d = 3 completing the cube cost more, so d = 3
#: keeps the rule above (docs/decisions/0008).
WHOLE_SQUARE_DENSITY = 16.0
#: The halo: a cell holding at least :data:`HALO_MIN_MASS` records of guide mass, and a face
#: neighbour of its depth holding at least this many times as much and split by the rule above,
#: is split too. The records of a cell next to a much denser one tend to lie against it (a
#: city's outskirts, a track leaving a place it dwelt in): the guide, spreading them over the
#: cell, does not see it, and the m·D rule leaves them at the cell's centre, on the far side;
#: the halo follows the dense region's edge down while the sparser side still holds guide mass.
#: With no floor on the cell's own mass it cost accuracy (docs/decisions/0011).
HALO_RATIO = 4.0
HALO_MIN_MASS = 32.0


def split_threshold(epsilon: float) -> float:
    """θ · E|noise of one leaf| at ``epsilon``: the cost of one more leaf that a split must beat
    (guide mass × diameter). E|Lap_Z(1/ε)| = 1/sinh(ε) ≈ 1/ε at small ε, but → 2e^{−ε} at large
    ε, where the integer noise is almost always 0: then cells split down to ``max_depth`` wherever
    the guide has mass, so the release tends to the true prefix (consistency, issue 14)."""
    return SPLIT_THRESHOLD * discrete_laplace_mean_abs(1.0 / epsilon)


def guided_partition(starts: np.ndarray, density: np.ndarray, depth: int, threshold: float,
                     d: int, max_depth: int, widths: np.ndarray | None = None
                     ) -> tuple[np.ndarray, CellIds]:
    """Leaves (depths, Morton prefixes) of the cells split while guide mass × D_k > threshold
    (and the guide mass is at least :data:`MIN_SPLIT_MASS`).

    The guide is a piecewise-constant mass density on Morton intervals of depth ``depth``
    (``starts``, mass per depth-``depth`` cell); D_k = 2^−⌊k/d⌋ is the ℓ∞ diameter of a cell of
    depth k. Cells deeper than ``depth`` lie inside one guide cell (mass halves per level). A
    deterministic function of the guide: no data, no noise.

    >>> depths, prefixes = guided_partition(np.array([0]), np.array([100.0]), 0, 10.0, 1, 20)
    >>> depths.tolist(), prefixes.tolist()
    ([2, 2, 2, 2], [0, 1, 2, 3])
    """
    starts = np.asarray(starts, dtype=np.float64)
    widths = (np.diff(np.concatenate([starts, [float(1 << depth)]])) if widths is None else
              np.asarray(widths, np.float64))
    whole = WHOLE_SQUARE_DENSITY if d == 2 else np.inf
    return _partition(starts, np.asarray(density, np.float64), widths, depth, threshold, d,
                      max_depth, whole, HALO_RATIO, HALO_MIN_MASS)


#: [d] → the 64-bit word with every d-th bit set, from bit 0 (the digits of one axis).
_EVERY_DTH_BIT = np.array([0] + [sum(1 << k for k in range(0, 64, d)) for d in range(1, 65)],
                          np.uint64)


@njit(cache=True)
def face_neighbour(prefix: np.uint64, depth: int, d: int, axis: int, step: int
                   ) -> tuple[np.uint64, bool]:
    """(the Morton prefix, whether it exists) of the depth-``depth`` cell next to ``prefix``
    along ``axis``, one cell up (``step`` 1) or down (−1): bit j of a prefix, most significant
    first, is a digit of coordinate j mod d (:mod:`dpsynth.tree`)."""
    one, full = np.uint64(1), ~np.uint64(0)
    if depth <= axis or d > 64:
        return prefix, False
    digits = _EVERY_DTH_BIT[d] << np.uint64((depth - 1 - axis) % d)
    mask = digits & (full >> np.uint64(64 - depth))  # the axis's digits among the prefix's
    own = prefix & mask  # the axis's digits, in place
    if (step > 0 and own == mask) or (step < 0 and own == 0):
        return prefix, False
    # ±1 on the masked digits: a carry or borrow runs through the other axes' bits, masked off
    moved = ((own | ~mask) + one) & mask if step > 0 else (own - one) & mask
    return (prefix & ~mask) | moved, True


@njit(cache=True)
def _partition(starts: Floats, density: Floats, widths: Floats, depth: int, threshold: float,
               d: int, max_depth: int, whole: float, halo_ratio: float, halo_min: float
               ) -> tuple[Counts, CellIds]:
    """:func:`guided_partition` depth first, so the leaves come out in Morton order; a cell
    split along some axes but not all (depth k not a multiple of d) is split again where its
    guide density is at least ``whole`` times the average (:data:`WHOLE_SQUARE_DENSITY`), and a
    cell next to a much denser one where the halo rule holds (:data:`HALO_RATIO`)."""
    cum = cumulative_mass(starts, density, widths)
    dense = whole * cum[cum.size - 1] / 2.0 ** depth  # guide mass per guide cell, × whole
    hint = 0  # depth first: the cells' starts never decrease, each query starts near the last
    spans = np.empty(max_depth + 1, np.float64)  # a depth-k cell's width in guide cells
    diameters = np.empty(max_depth + 1, np.float64)  # D_k (exact powers of two)
    for k in range(max_depth + 1):
        spans[k] = 2.0 ** (depth - k)
        diameters[k] = 2.0 ** -(k // d)
    depths = np.empty(64, np.int64)
    prefixes = np.empty(64, np.uint64)
    n = 0
    stack_depth = np.empty(2 * max_depth + 2, np.int64)
    stack_prefix = np.empty(2 * max_depth + 2, np.uint64)
    stack_depth[0], stack_prefix[0], top = 0, np.uint64(0), 1
    while top > 0:
        top -= 1
        k, prefix = stack_depth[top], stack_prefix[top]
        split = False
        if k < max_depth:
            low = float(prefix) * spans[k]
            mass, hint = mass_between(starts, density, cum, low, low + spans[k], hint)
            split = (mass >= MIN_SPLIT_MASS and mass * diameters[k] > threshold) or (
                k % d != 0 and mass >= dense * spans[k])
            if not split and mass >= halo_min:
                split = _next_to_denser(prefix, k, d, starts, density, cum, spans[k],
                                        halo_ratio * mass, threshold / diameters[k], hint)
        if split:  # the right child below the left: the left is visited first
            first = prefix << np.uint64(1)
            stack_depth[top], stack_prefix[top] = k + 1, first | np.uint64(1)
            stack_depth[top + 1], stack_prefix[top + 1] = k + 1, first
            top += 2
            continue
        if n == depths.size:
            depths = np.concatenate((depths, np.empty(n, np.int64)))
            prefixes = np.concatenate((prefixes, np.empty(n, np.uint64)))
        depths[n], prefixes[n] = k, prefix
        n += 1
    return depths[:n].copy(), prefixes[:n].copy()


@njit(cache=True)
def _next_to_denser(prefix: np.uint64, k: int, d: int, starts: Floats, density: Floats,
                    cum: Floats, span: float, least: float, split_mass: float, hint: int) -> bool:
    """Whether a face neighbour of the depth-k cell ``prefix`` holds at least ``least`` and
    more than ``split_mass`` of guide mass (the halo rule of :func:`_partition`); the
    queries gallop from ``hint``, the interval of the cell itself."""
    for axis in range(d):
        for step in (-1, 1):
            other, exists = face_neighbour(prefix, k, d, axis, step)
            if exists:
                low = float(other) * span
                mass, _ = mass_between(starts, density, cum, low, low + span, hint)
                if mass >= least and mass > split_mass:
                    return True
    return False
