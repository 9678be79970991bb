"""PrivTree on the Morton tree: a data-adaptive partition whose privacy cost ignores depth.

Layer: core. Zhang, Xiao and Xie, "PrivTree: A Differentially Private Algorithm for Hierarchical
Decompositions" (SIGMOD 2016, Alg 1) with fan-out β = 2: a node is one cell of the tree of
:mod:`dpsynth.tree` (midpoint splits, coordinates in turn), its children are the two halves. A node
v of depth k with count c(v) is split iff

    b(v) + Z_v > θ,    b(v) = max(c(v) − k·δ, θ − δ),    Z_v ~ Lap(λ),

with λ = (2β − 1)/((β − 1)·ε_s) = 3/ε_s and δ = λ·ln β (Zhang et al. Thm 3.1): the decision
noise of a whole tree costs ε_s under add/remove of one record, whatever the depth, because the
biased count falls by δ per level and the loss of the nodes far from θ decays geometrically.

Exactness (privacy: P2a, P10). Counts, θ and δ are compared in units of 1/:data:`GRID`, with
*exact* discrete Laplace noise Lap_Z(λ·GRID) (:mod:`dpsynth.noise`) instead of a float Laplace, so
every decision is an exact integer comparison. The constants of the discrete tails differ from
the continuous ones by a factor 2/(1+p) ≤ 1 + 1/(2λ·GRID); rather than trust the continuous proof,
:func:`privtree_path_loss` computes the worst-case loss of a root-to-leaf path *exactly* for the
discrete noise (a dynamic programme over non-increasing count sequences) and
:func:`privtree_params` raises λ until that loss is at most ε_s.

Noise addresses: decision of node (depth k, Morton prefix p) = (context + ("split",), p, k), or
at a small λ the rare outcomes of a level's class (:mod:`.privtree_descent`); the noisy leaf
count = (context + ("leaf",), p, k). A replay draws exactly the same tree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

from dpsynth._types import CellIds, Counts
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, effective_scale
from dpsynth.noise.sparse import nonzero_share
from dpsynth.online import privtree_descent
from dpsynth.online.privtree_descent import GRID, biased_counts

#: Beyond this many noise scales above θ a node's decision loss is below e^-60 (ignored).
_TAIL_SCALES = 60
#: Decisions are drawn as rare outcomes per class (:func:`.privtree_descent.descend_rare`)
#: where the noise scale λ is at most one record (ε_s ≳ 2.1 for β = 2, depth 20): most nodes
#: are then many scales from θ, their decisions nearly certain; the same distribution (P2c).
RARE_MAX_SCALE = GRID
#: Leaf counts draw only their nonzero noise where P(Lap_Z ≠ 0) is at most this (ε_c ≳ 2.1):
#: one draw per nonzero value instead of one per leaf, the same distribution (P2c).
NONZERO_SHARE = 0.25


@dataclass(frozen=True)
class PrivTreeParams:
    """Public parameters of one PrivTree (all comparisons in units of 1/GRID).

    Attributes
    ----------
    epsilon
        ε_s, the budget of the split decisions (the whole tree, any depth).
    scale_units
        λ·GRID, the scale of the discrete Laplace decision noise.
    delta_units
        δ·GRID = ⌈λ·ln 2·GRID⌉ (rounded up: a larger bias only lowers the loss).
    theta_units
        θ·GRID, the split threshold (θ = 0 by default, as in PrivTree and PHDStream).
    max_depth
        Nodes of this depth are leaves without a decision.
    path_loss
        The exact worst-case loss of the decisions on one root-to-leaf path (≤ epsilon).
    stride
        Tree levels per decision: 1 (β = 2, halves) or d (β = 2^d, e.g. quadrants in 2-D).
    """

    epsilon: float
    scale_units: float
    delta_units: int
    theta_units: int
    max_depth: int
    path_loss: float
    stride: int = 1

    @property
    def fanout(self) -> int:
        """β = 2^stride children per split (stride = tree levels per decision)."""
        return 1 << self.stride

    @property
    def lam(self) -> float:
        """λ in counts."""
        return self.scale_units / GRID


def _decision_log_probabilities(
    b_units: np.ndarray, theta_units: int, scale_units: float
) -> tuple[np.ndarray, np.ndarray]:
    """(ln P(split), ln P(leaf)) for b + Z > θ, Z ~ Lap_Z(scale) on the grid, both tails exact.

    Split iff Z ≥ a = θ − b + 1. For a ≥ 1, P(Z ≥ a) = p^a/(1+p); for a ≤ 0,
    P(Z ≤ a − 1) = p^(1−a)/(1+p). Each small tail is computed directly, never as 1 − (≈1).
    """
    sigma = effective_scale(scale_units)
    log_p = -float(sigma.denominator) / float(sigma.numerator)
    log_norm = math.log1p(math.exp(log_p))  # ln(1 + p)
    a = theta_units - np.asarray(b_units, dtype=np.float64) + 1.0
    small_split = a * log_p - log_norm  # ln P(Z ≥ a), used when a ≥ 1
    small_leaf = (1.0 - a) * log_p - log_norm  # ln P(Z ≤ a − 1), used when a ≤ 0
    with np.errstate(divide="ignore"):  # the branch np.where discards may hit log(0)
        log_split = np.where(a >= 1.0, small_split, np.log1p(-np.exp(np.minimum(small_leaf, 0))))
        log_leaf = np.where(a <= 0.0, small_leaf, np.log1p(-np.exp(np.minimum(small_split, 0))))
    return log_split, log_leaf


def privtree_path_loss(
    scale_units: float, delta_units: int, theta_units: int, max_depth: int
) -> float:
    """Exact worst-case privacy loss of the split decisions along one root-to-leaf path.

    One added (or removed) record changes the count of every node on its path by one and of no
    other node. The path's nodes 0..k−1 are split and node k is a leaf (no decision at
    ``max_depth``); the counts c_0 ≥ c_1 ≥ … ≥ c_k ≥ 0 are non-increasing (a child holds part of
    its parent). The loss is bounded by Σ_{i<k} |ln P(split | c_i+1) − ln P(split | c_i)| +
    |ln P(leaf | c_k+1) − ln P(leaf | c_k)|, maximised over k and the counts by dynamic
    programming over the count (counts more than 60 noise scales above θ + k·δ contribute
    below e^-60 and are cut off).

    >>> p = privtree_params(0.5, max_depth=20)
    >>> round(p.path_loss, 3) <= 0.5
    True
    """
    top = (max(theta_units, 0) + max_depth * delta_units + _TAIL_SCALES * scale_units) / GRID + 2
    c = np.arange(int(math.ceil(top)) + 1)
    best = np.zeros(c.size)  # best loss from depth k on, given c_k ≤ c (non-increasing)
    for k in range(max_depth, -1, -1):
        if k == max_depth:  # noqa: SIM108
            here = np.zeros(c.size)  # a forced leaf: no decision, no loss
        else:
            split_lo, leaf_lo = _decision_log_probabilities(
                biased_counts(c, k, delta_units, theta_units), theta_units, scale_units)
            split_hi, leaf_hi = _decision_log_probabilities(
                biased_counts(c + 1, k, delta_units, theta_units), theta_units, scale_units)
            split_loss = np.abs(split_hi - split_lo)
            leaf_loss = np.abs(leaf_hi - leaf_lo)
            here = np.maximum(leaf_loss, split_loss + best)  # stop here, or split and go on
        best = np.maximum.accumulate(here)  # the child's count may be any c' ≤ c
    return float(best[-1])


@lru_cache(maxsize=64)
def privtree_params(
    epsilon: float, *, max_depth: int, theta: float = 0.0, stride: int = 1
) -> PrivTreeParams:
    """The smallest decision scale λ (δ = ⌈λ ln 2⌉ on the grid) whose exact path loss is ≤ ε_s.

    Zhang et al.'s λ = 3/ε_s (β = 2) is a sufficient bound for continuous noise; the exact loss
    of :func:`privtree_path_loss` is about 20 % below it, so λ is found by bisection on
    [λ_PrivTree/4, 2·λ_PrivTree] and the returned parameters always satisfy loss ≤ ε_s.
    """
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"PrivTree budget ({epsilon!r}) must be a finite number > 0")
    if not isinstance(max_depth, int) or not 0 <= max_depth <= 62:
        raise ConfigError(f"max_depth ({max_depth!r}) must be an integer in [0, 62]")
    if stride not in (1, 2, 3):
        raise ConfigError(f"stride ({stride!r}) must be 1, 2 or 3 tree levels per decision")
    theta_units = int(round(theta * GRID))
    decisions = max_depth // stride  # decision levels; their children are leaves at the end
    beta = 1 << stride

    def loss_at(scale: float) -> tuple[float, float, int]:
        scale_units = scale * GRID
        delta_units = int(math.ceil(scale_units * math.log(beta)))
        return (privtree_path_loss(scale_units, delta_units, theta_units, decisions),
                scale_units, delta_units)

    nominal = (2 * beta - 1) / ((beta - 1) * epsilon)  # Zhang et al.'s λ for fan-out β
    low, high = nominal / 4, 2 * nominal
    if loss_at(high)[0] > epsilon:
        raise ConfigError(f"no PrivTree scale found for budget {epsilon}; use a larger budget")
    for _ in range(24):
        mid = (low + high) / 2
        if loss_at(mid)[0] <= epsilon:
            high = mid
        else:
            low = mid
    loss, scale_units, delta_units = loss_at(high)
    assert loss <= epsilon  # privacy: P10
    return PrivTreeParams(epsilon, scale_units, delta_units, theta_units,
                          decisions * stride, loss, stride)


def _cumulative(weights: Counts) -> Counts:
    """Prefix sums [0, w_0, w_0 + w_1, …] of leaf weights, for :func:`_leaf_true_counts`."""
    cum = np.zeros(len(weights) + 1, np.int64)
    np.cumsum(weights, out=cum[1:])
    return cum


@njit(cache=True)
def _leaf_true_counts(cells: CellIds, cum: Counts, depths: Counts, prefixes: CellIds,
                      address_depth: int) -> Counts:
    """Record counts of the leaves (``depths``, ``prefixes``; any order), from sorted addresses
    and the prefix sums of their weights, in one compiled pass (two binary searches a leaf)."""
    out = np.empty(depths.size, np.int64)
    for j in range(depths.size):
        shift = np.uint64(address_depth - depths[j])
        lo = np.searchsorted(cells, prefixes[j] << shift)
        hi = np.searchsorted(cells, (prefixes[j] + np.uint64(1)) << shift)
        out[j] = cum[hi] - cum[lo]
    return out


def privtree_leaves(
    cells: CellIds,
    weights: Counts,
    params: PrivTreeParams,
    noise: KeyedNoise,
    context: Sequence[int | str],
    *,
    address_depth: int,
) -> tuple[np.ndarray, CellIds]:
    """The leaves (depths, Morton prefixes) of a PrivTree over a histogram (Alg 1).

    ``cells`` are sorted distinct addresses at ``address_depth`` (≥ params.max_depth) and
    ``weights`` their record counts. Nodes are visited depth by depth in one compiled pass
    (:mod:`~dpsynth.online.privtree_descent`); a node's decision noise is the draw that
    ``noise.discrete_laplace_at(λ·GRID, context + ("split",), prefix, depth)`` returns, or,
    where λ ≤ :data:`RARE_MAX_SCALE` units, the decisions are drawn per class as rare outcomes.
    """
    depths, prefixes, _ = _leaves_and_counts(cells, weights, params, noise, context,
                                             address_depth)
    return depths, prefixes


def _leaves_and_counts(cells: CellIds, weights: Counts, params: PrivTreeParams,
                       noise: KeyedNoise, context: Sequence[int | str],
                       address_depth: int) -> tuple[np.ndarray, CellIds, Counts]:
    """:func:`privtree_leaves` with each leaf's true record count."""
    if address_depth < params.max_depth:
        raise ValueError("address_depth must be at least the PrivTree's max_depth")
    cells = np.ascontiguousarray(cells, dtype=np.uint64)
    cum = _cumulative(np.asarray(weights, dtype=np.int64))
    if effective_scale(params.scale_units) <= RARE_MAX_SCALE:  # a function of ε_s (public)
        return privtree_descent.descend_rare(cells, cum, params, noise, context, address_depth)
    return privtree_descent.descend_dense(cells, cum, params, noise, context, address_depth)


def noisy_leaf_counts(
    cells: CellIds,
    weights: Counts | None,
    depths: np.ndarray,
    prefixes: CellIds,
    epsilon: float,
    noise: KeyedNoise,
    context: Sequence[int | str],
    *,
    address_depth: int,
) -> Counts:
    """c(leaf) + Lap_Z(1/ε_c) per leaf: ε_c-DP, since a record lies in exactly one leaf.

    ``cells``: sorted addresses at ``address_depth`` and ``weights`` their record counts (leaves
    in any order); or, with ``weights`` None, the records themselves in any order and leaves
    that partition the cube in Morton order (guided's: no sort of the records).
    """
    cells = np.asarray(cells, dtype=np.uint64)
    depths, prefixes = np.asarray(depths, np.int64), np.asarray(prefixes, np.uint64)
    true = (_records_per_leaf(cells, depths, prefixes, address_depth) if weights is None else
            _leaf_true_counts(cells, _cumulative(np.asarray(weights, dtype=np.int64)), depths,
                              prefixes, address_depth))
    return _with_leaf_noise(true, depths, prefixes, epsilon, noise, context)


@njit(cache=True)
def _records_per_leaf(records: CellIds, depths: Counts, prefixes: CellIds,
                      address_depth: int) -> Counts:
    """Records per leaf of a partition in Morton order: a branch-free binary search of each
    record among the leaves' first addresses (faster than sorting the records)."""
    starts = np.empty(depths.size, np.uint64)
    for j in range(depths.size):
        starts[j] = prefixes[j] << np.uint64(address_depth - depths[j])
    counts = np.zeros(depths.size, np.int64)
    for r in records:
        lo, n = 0, depths.size
        while n > 1:
            half = n >> 1
            lo += half * (starts[lo + half] <= r)
            n -= half
        counts[lo] += 1
    return counts


def _with_leaf_noise(true: Counts, depths: np.ndarray, prefixes: CellIds, epsilon: float,
                     noise: KeyedNoise, context: Sequence[int | str]) -> Counts:
    """true + Lap_Z(1/ε_c): one draw per leaf addressed by (context + ("leaf",), prefix, depth),
    or, where P(Lap_Z ≠ 0) ≤ :data:`NONZERO_SHARE` (a function of ε_c only), the nonzero
    draws of the leaves in their order, at (context + ("leaf", "nonzero"), j, ·): the same
    distribution (privacy: P2c) at the cost of the nonzero draws. Either way the noise of
    ``context`` + ("leaf",) is drawn once per summary."""
    scale = 1.0 / epsilon
    if nonzero_share(scale) <= NONZERO_SHARE:
        positions, values = noise.discrete_laplace_nonzero(scale, (*context, "leaf"), true.size)
        out = np.array(true, np.int64)
        out[positions] += values
        return out
    return true + noise.discrete_laplace_at(scale, (*context, "leaf"), prefixes,
                                            depths.astype(np.uint64))


def privtree_histogram(
    cells: CellIds,
    weights: Counts,
    structure: float,
    counts: float,
    noise: KeyedNoise,
    context: Sequence[int | str],
    *,
    max_depth: int,
) -> tuple[np.ndarray, CellIds, Counts]:
    """(depths, prefixes, noisy counts) of a PrivTree over a histogram at ``max_depth``.

    ε_s = ``structure`` for the split decisions, ε_c = ``counts`` for the leaf counts: an
    (ε_s + ε_c)-DP histogram under add/remove of one record (privacy: P9, P10).
    """
    params = privtree_params(structure, max_depth=max_depth)
    depths, prefixes, true = _leaves_and_counts(cells, weights, params, noise, context,
                                                max_depth)
    noisy = _with_leaf_noise(true, depths, prefixes, counts, noise, context)
    return depths, prefixes, noisy  # privacy: P9 (a record lies in exactly one leaf)
