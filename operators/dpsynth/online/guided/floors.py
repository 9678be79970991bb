"""Floors of guided summaries where the guide expects no record: phantom mass kept in check.

Layer: core, post-processing only (privacy: P6). A guided summary's partition covers the whole
cube, and where the guide (released summaries, plus a uniform prior) saw nothing it still has
leaves, each with its own noise Lap_Z(1/ε). A leaf is kept when its noisy count exceeds a floor
of a few noise scales (:data:`dpsynth.online.guided.LEAF_FLOOR_SCALES`), so of K empty leaves
about K·P(Lap_Z ≥ floor) survive, each with a few records of pure noise: phantom mass spread
over empty space. On concentrated data most leaves are empty, and the phantom mass is the
coarse part of the W1 error and a bias toward the cube's centre that no t removes
(docs/decisions/0005).

So a leaf whose *neighbourhood* — its ancestor :data:`NEIGHBOURHOOD` tree levels up — holds
less than :data:`EXPECTED_EMPTY` records of guide mass is held to a higher floor: the smallest
integer m with K_e · P(Lap_Z(1/ε) ≥ m) ≤ :data:`FALSE_LEAVES`, where K_e is the number of such
leaves in the summary and P(Z ≥ m) = p^m/(1 + p), p = e^{−ε} (a multiple-testing bound on the
largest noise, as in the universal threshold of Donoho and Johnstone 1994), so that pure noise
keeps about FALSE_LEAVES such leaves per summary. The neighbourhood, not the leaf: a fine guide
of a few hundred records is zero in most of its own fine cells even on uniform data, where
records still arrive next to the guide's. Other leaves keep the plain floor. A fresh cluster
where the guide saw nothing is kept once it holds about m records; below that, this summary
drops it (the next summaries, guided by this one, see it again).

Privacy: a function of the noisy counts, the partition and the guide (released summaries) and
of ε (public): post-processing (docs/privacy.md P6, P16); no record is read.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import njit

from dpsynth._types import CellIds, Counts, Points
from dpsynth.online.guided.guide_mass import cumulative_mass, mass_between
from dpsynth.tree import first_cells

#: A leaf whose neighbourhood holds less guide mass than this many records is "expected empty".
EXPECTED_EMPTY = 0.5
#: The neighbourhood of a leaf: its ancestor this many tree levels up (4 times its volume).
NEIGHBOURHOOD = 2
#: A leaf the guide leaves empty while its neighbourhood holds so much that, spread evenly, at
#: least this many records would have fallen in the leaf, is expected empty too.
SIGNIFICANT = 30.0
#: The expected number of expected-empty leaves of one summary that pure noise keeps (and of
#: neighbourhoods that pure noise makes look occupied, in a summary without a guide).
FALSE_LEAVES = 0.1
#: A summary without a guide (block 0): a leaf is expected empty when the noisy sum over its
#: ancestor this many tree levels up is below this many standard deviations of its noise, or
#: below the multiple-testing floor of such sums (:func:`self_empty`).
SELF_NEIGHBOURHOOD = 4
SELF_SCORE = 2.0


def _ancestors(depths: np.ndarray, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(depths, prefixes) of each leaf's neighbourhood: its ancestor :data:`NEIGHBOURHOOD`
    tree levels up, or the cube."""
    up = np.minimum(np.asarray(depths, np.int64), NEIGHBOURHOOD)
    return (np.asarray(depths, np.int64) - up,
            np.asarray(prefixes, np.uint64) >> up.astype(np.uint64))


def _guide_arrays(starts: np.ndarray, density: np.ndarray, widths: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, density, cumulative mass) of a guide, as the compiled queries read them."""
    starts = np.asarray(starts, np.float64)
    density = np.asarray(density, np.float64)
    return starts, density, cumulative_mass(starts, density, np.asarray(widths, np.float64))


def guide_expects_empty(starts: np.ndarray, density: np.ndarray, widths: np.ndarray,
                        depth: int, depths: np.ndarray, prefixes: np.ndarray) -> np.ndarray:
    """The leaves the guide expects empty: its neighbourhood holds under
    :data:`EXPECTED_EMPTY` records of guide mass, or the leaf itself does while its neighbourhood,
    spread evenly, would have put at least :data:`SIGNIFICANT` records in it (the guide resolved
    the leaf as empty: the siblings of a dense corner's path from the root)."""
    depths = np.asarray(depths, np.int64)
    prefixes = np.asarray(prefixes, np.uint64)
    guide = _guide_arrays(starts, density, widths)  # one cumulative mass for both queries
    near = _leaf_masses(*guide, depth, *_ancestors(depths, prefixes))
    own = _leaf_masses(*guide, depth, depths, prefixes)
    share = 0.5 ** np.minimum(depths, NEIGHBOURHOOD)  # the leaf's volume over its ancestor's
    empty: np.ndarray = (near < EXPECTED_EMPTY) | ((own < EXPECTED_EMPTY)
                                                  & (near * share >= SIGNIFICANT))
    return empty


def leaf_guide_mass(starts: np.ndarray, density: np.ndarray, widths: np.ndarray, depth: int,
                    depths: np.ndarray, prefixes: np.ndarray) -> np.ndarray:
    """The guide's mass in each cell (depths, Morton prefixes), the guide a
    piecewise-constant density on Morton intervals of depth ``depth`` (``starts``, ``widths``,
    mass per depth-``depth`` cell)."""
    return _leaf_masses(*_guide_arrays(starts, density, widths), depth,
                        np.asarray(depths, np.int64), np.asarray(prefixes, np.uint64))


@njit(cache=True)
def _leaf_masses(starts: Points, density: Points, cum: Points, depth: int, depths: Counts,
                 prefixes: CellIds) -> Points:
    out = np.empty(depths.size, np.float64)
    hint = 0  # leaves come in Morton order: each query starts near the previous one
    for j in range(depths.size):
        span = 2.0 ** (depth - depths[j])  # in depth-`depth` cells (fractional if deeper)
        low = float(prefixes[j]) * span
        out[j], hint = mass_between(starts, density, cum, low, low + span, hint)
    return out


def empty_floor(epsilon: float, empty_leaves: int, summed: int = 1) -> int:
    """The smallest integer m with ``empty_leaves`` · P(S ≥ m) ≤ :data:`FALSE_LEAVES`, S the
    sum of ``summed`` independent Lap_Z(1/ε) (one leaf's noise, or a neighbourhood's); 0
    without such leaves.

    >>> empty_floor(1.0, 100), empty_floor(0.36, 100), empty_floor(10.0, 100)
    (7, 18, 1)
    >>> empty_floor(5.0, 128), empty_floor(5.0, 128, summed=16)
    (2, 3)
    """
    if empty_leaves <= 0:
        return 0
    if summed > 1:
        return _sum_floor(float(epsilon), int(empty_leaves), int(summed))
    log_p = -float(epsilon)
    bound = math.log(FALSE_LEAVES * (1.0 + math.exp(log_p)) / empty_leaves)
    return max(int(math.ceil(bound / log_p)), 0) if bound < 0 else 0


@lru_cache(maxsize=256)
def _sum_floor(epsilon: float, tests: int, summed: int) -> int:
    """:func:`empty_floor` of a sum of k = ``summed`` leaves' noise. A Lap_Z(1/ε) is the
    difference of two independent geometric counts of failures with success probability
    1 − p, p = e^{−ε}, so S = N1 − N2 with N1, N2 negative binomial (k, 1 − p), and
    P(S ≥ m) = Σ_j P(N2 = j) P(N1 ≥ m + j); the tail falls in m, so m is found by bisection.
    The pmf is cut where it is below e^{−40}."""
    p = math.exp(-epsilon)
    size = int(math.ceil((40.0 + summed + 2.0 * math.log(summed)) / epsilon)) + 8 * summed
    j = np.arange(1, size, dtype=np.float64)
    pmf = np.empty(size)
    pmf[0] = (1.0 - p) ** summed
    pmf[1:] = pmf[0] * np.cumprod(p * (j + summed - 1) / j)  # negative binomial, by recursion
    survival = np.cumsum(pmf[::-1])[::-1]  # P(N ≥ n)

    def too_likely(m: int) -> bool:
        return tests * float(pmf[:size - m] @ survival[m:]) > FALSE_LEAVES

    low, high = 0, size - 1  # too_likely(0) always (P(S ≥ 0) ≥ ½); the answer is in (low, high]
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if too_likely(mid) else (low, mid)
    return high


def self_empty(depths: np.ndarray, prefixes: np.ndarray, counts: np.ndarray, epsilon: float,
               max_depth: int) -> np.ndarray:
    """Leaves (Morton order) of a summary without a guide that are expected empty by its own
    counts: the noisy sum over the leaf's ancestor :data:`SELF_NEIGHBOURHOOD` tree levels up is
    below :data:`SELF_SCORE` standard deviations of the noise of the leaves it holds, or below
    :func:`empty_floor` of such sums over the summary's neighbourhoods (pure noise makes about
    :data:`FALSE_LEAVES` of them look occupied; docs/decisions/0006)."""
    from dpsynth.noise import discrete_laplace_variance

    depths = np.asarray(depths, np.int64)
    top = np.uint64(max_depth)
    starts = first_cells(depths, prefixes, depth=max_depth)
    up = np.minimum(depths, SELF_NEIGHBOURHOOD).astype(np.uint64)
    span = np.uint64(1) << (top - depths.astype(np.uint64) + up)  # the ancestor's width
    low = (starts // span) * span
    first = np.searchsorted(starts, low)
    last = np.searchsorted(starts, low + span)
    cum = np.concatenate([[0.0], np.cumsum(np.asarray(counts, np.float64))])
    total = cum[last] - cum[first]
    held = last - first  # the leaves of each neighbourhood
    sd = np.sqrt(held * discrete_laplace_variance(1.0 / epsilon))
    # pure noise must not make more than FALSE_LEAVES neighbourhoods look occupied: at large ε
    # the sd is a fraction of a record and two phantom records in one neighbourhood are not rare
    neighbourhoods = int(np.unique(low).size)
    sizes, index = np.unique(held, return_inverse=True)
    bar = np.array([empty_floor(epsilon, neighbourhoods, summed=int(k)) for k in sizes])[index]
    empty: np.ndarray = total < np.maximum(SELF_SCORE * sd, bar)
    return empty


def floored_counts(counts: np.ndarray, empty: np.ndarray, epsilon: float,
                   floor: float) -> np.ndarray:
    """``counts`` with every expected-empty leaf (``empty``) whose count is below
    :func:`empty_floor` set to 0 (the others unchanged: the plain ``floor`` is applied where
    they are read)."""
    m = empty_floor(epsilon, int(empty.sum()))
    if m <= floor:
        return counts
    return np.where(empty & (counts < m), 0, counts).astype(counts.dtype)
