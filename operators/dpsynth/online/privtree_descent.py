"""The PrivTree descent: every split decision of one tree, level by level, in one compiled pass.

Layer: core (privacy: P10, P2c). Decision level i (tree depth k = i·stride) splits node v iff
b(v) + Z_v > θ, b(v) = max(c(v)·GRID − i·δ, θ − δ), in exact integers (:mod:`.privtree`), that
is iff Z_v ≥ a(v) = θ − b(v) + 1. The decisions are drawn one way or the other, by a function
of ε_s only (public):

* *dense* (:func:`descend_dense`): one exact Lap_Z draw per node, addressed
  (context + ("split",), prefix, k);
* *rare outcomes* (:func:`descend_rare`, where the noise scale is at most one record): the
  nodes of a level with the same a are iid trials whose less likely outcome has probability
  r = p^n/(1 + p), n = a for a ≥ 1 (a split) and n = 1 − a for a ≤ 0 (a leaf); the level draws,
  for each class a, the positions of that outcome among the class's nodes in descent order —
  a Bernoulli(r) process (:func:`dpsynth.noise.sparse.tail_positions`) at
  (context + ("split", "rare"), j, event e(k, a)). Each decision has exactly its law in
  Alg 1 and all are independent given the counts, so the tree has Alg 1's distribution
  (P2c), at a cost of about one keystream block per class and per rare outcome: at a large ε
  almost every node is far from θ and its decision nearly certain. Where double precision
  cannot decide a gap (about once in 10¹¹) the pass stops, the decimal exact path decides it
  and the pass runs again with that gap given: the same tree.

Leaves come out level by level, in the order of the active nodes (children in Morton order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth._types import CellIds, Counts
from dpsynth.noise import (
    KeyedNoise,
    discrete_laplace_draw,
    effective_scale,
    rare_draws_into,
    sparse,
    tail_rate_bounds,
)

#: Counts, θ and δ are compared in units of 1/GRID.
GRID = 64
#: e(k, a) = k·2^41 + a + 2^40: a class's process event, |a| < 2^40 (a count below 1.7·10¹⁰)
_CLASS_BITS = 41
_CLASS_OFFSET = 1 << 40
#: The double-precision path's widening (:data:`dpsynth.noise.sparse.MARGIN`; tests raise it
#: to send every gap through the exact path).
MARGIN = sparse.MARGIN

Words = NDArray[np.uint64]


def biased_counts(counts: np.ndarray, depth: int, delta_units: int, theta_units: int) -> np.ndarray:
    """b(v)·GRID = max(c·GRID − k·δ, θ − δ) for nodes k decisions deep (Alg 1 line 4)."""
    c = np.asarray(counts, dtype=np.int64) * GRID
    return np.maximum(c - depth * delta_units, theta_units - delta_units)


def descend_dense(cells: CellIds, cum: Counts, params: Any, noise: KeyedNoise,
                  context: Sequence[int | str], address_depth: int
                  ) -> tuple[Counts, CellIds, Counts]:
    """The tree with one decision draw per node (the module docstring's dense form)."""
    return _run(False, noise.subkey((*context, "split")), cells, cum, params, address_depth,
                MARGIN)


def descend_rare(cells: CellIds, cum: Counts, params: Any, noise: KeyedNoise,
                 context: Sequence[int | str], address_depth: int, *,
                 margin: float | None = None) -> tuple[Counts, CellIds, Counts]:
    """The tree with each level's rare decision outcomes drawn per class (the module
    docstring); ``margin``: the double-precision widening (default :data:`MARGIN`)."""
    return _run(True, noise.subkey((*context, "split", "rare")), cells, cum, params,
                address_depth, MARGIN if margin is None else margin)


def _run(rare: bool, key: Words, cells: CellIds, cum: Counts, params: Any, address_depth: int,
         margin: float) -> tuple[Counts, CellIds, Counts]:
    """The compiled pass, again with each gap it could not decide given exactly."""
    sigma = effective_scale(params.scale_units)  # privacy: P2a (rounded up)
    t, s = sigma.numerator, sigma.denominator
    forced: list[tuple[int, int, int]] = []  # (event, selection j, gap), by event then j
    while True:
        table = np.array(forced, np.int64).reshape(-1, 3)
        events, js, gaps = (np.ascontiguousarray(table[:, c]) for c in range(3))
        depths, prefixes, counts, stop = _descend(
            key, rare, np.uint64(t), np.uint64(s), margin, events, js, gaps, cells, cum,
            address_depth, params.max_depth, params.stride, params.delta_units,
            params.theta_units)
        if stop[0] < 0:
            return depths, prefixes, counts
        event, j, n, remaining = (int(v) for v in stop)
        forced.append((event, j, sparse.exact_gap(key, j, t, s, remaining, rate=(1, n),
                                                  event=event)))
        forced.sort()


@njit(cache=True)
def _dense_splits(key: Words, t: np.uint64, s: np.uint64, k: int, active: CellIds, b: Counts,
                  theta_units: int, buf: Words) -> np.ndarray:
    """b + Z > θ, one Lap_Z(t/s) draw per node at (prefix, k)."""
    split = np.empty(active.size, np.bool_)
    for j in range(active.size):
        split[j] = b[j] + discrete_laplace_draw(key, t, s, active[j], np.uint64(k), buf) \
            > theta_units
    return split


@njit(cache=True)
def _rare_splits(key: Words, t: np.uint64, s: np.uint64, margin: float, forced_events: Counts,
                 forced_js: Counts, forced_gaps: Counts, k: int, b: Counts, theta_units: int,
                 stop: Counts) -> np.ndarray:
    """The level's decisions drawn per class a = θ − b + 1 (module docstring); on a gap
    double precision cannot decide, ``stop`` = (event, selection, n, trials remaining)."""
    a = theta_units - b + 1  # split iff Z ≥ a
    split = np.empty(b.size, np.bool_)
    order = np.argsort(a, kind="mergesort")  # stable: a class's nodes in descent order
    at = np.empty(b.size, np.int64)
    none = np.empty(0, np.int64)
    start = 0
    while start < b.size:
        cls = a[order[start]]
        end = start + 1
        while end < b.size and a[order[end]] == cls:
            end += 1
        n = cls if cls >= 1 else 1 - cls  # the rare outcome: Z ≥ n (split) or Z ≤ −n (leaf)
        if n >= _CLASS_OFFSET:
            raise ValueError("a PrivTree count above 1.7e10 records")
        lo, hi = tail_rate_bounds(t, s, n, 1)
        event = (np.int64(k) << _CLASS_BITS) + cls + _CLASS_OFFSET
        mine = forced_events == event
        selected, ambiguous = rare_draws_into(
            key, t, s, np.uint64(event), end - start, lo, hi, margin, forced_js[mine],
            forced_gaps[mine], at, none)
        if ambiguous >= 0:
            stop[0], stop[1], stop[2] = event, ambiguous, n
            stop[3] = end - start - (at[selected - 1] + 1 if selected else 0)
            return split
        for q in range(start, end):
            split[order[q]] = cls <= 0  # the likely outcome
        for q in range(selected):
            split[order[start + at[q]]] = cls >= 1
        start = end
    return split


@njit(cache=True)
def _descend(key: Words, rare: bool, t: np.uint64, s: np.uint64, margin: float,
             forced_events: Counts, forced_js: Counts, forced_gaps: Counts, cells: CellIds,
             cum: Counts, address_depth: int, max_depth: int, stride: int, delta_units: int,
             theta_units: int) -> tuple[Counts, CellIds, Counts, Counts]:
    """Breadth-first PrivTree (module docstring): (depths, prefixes, true counts, stop), stop[0]
    ≥ 0 when a gap needs the exact path (:func:`_rare_splits`). Shifts stay in uint64 (numba
    turns uint64-with-int64 into floats)."""
    buf = np.empty(16, np.uint64)
    stop = np.full(4, -1, np.int64)
    fanout = 1 << stride
    leaf_depths = np.empty(64, np.int64)
    leaf_prefixes = np.empty(64, np.uint64)
    leaf_counts = np.empty(64, np.int64)
    leaves = 0
    active = np.zeros(1, np.uint64)
    first = np.zeros(1, np.int64)  # the active nodes' ranges of ``cells``: [first, end)
    end = np.full(1, cells.size, np.int64)
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
        count = np.empty(active.size, np.int64)
        for j in range(active.size):
            count[j] = cum[end[j]] - cum[first[j]]
        if k == max_depth:  # forced leaves: no decision
            for j in range(active.size):
                leaf_depths[leaves] = k
                leaf_prefixes[leaves] = active[j]
                leaf_counts[leaves] = count[j]
                leaves += 1
            break
        b = np.maximum(count * GRID - np.int64(i) * np.int64(delta_units),
                       theta_units - delta_units)
        if rare:
            split = _rare_splits(key, t, s, margin, forced_events, forced_js, forced_gaps, k, b,
                                 theta_units, stop)
            if stop[0] >= 0:
                leaves = 0
                break
        else:
            split = _dense_splits(key, t, s, k, active, b, theta_units, buf)
        children = np.empty(active.size * fanout, np.uint64)
        child_first = np.empty(active.size * fanout, np.int64)
        child_end = np.empty(active.size * fanout, np.int64)
        child_shift = np.uint64(address_depth - k - stride)
        splits = 0
        for j in range(active.size):
            if split[j]:
                base = active[j] << np.uint64(stride)
                lo, hi = first[j], end[j]
                at = splits * fanout
                child_first[at] = lo
                child_end[at + fanout - 1] = hi
                for c in range(1, fanout):  # the children's ranges split the parent's
                    cut = lo + np.searchsorted(cells[lo:hi], (base | np.uint64(c)) << child_shift)
                    child_end[at + c - 1] = cut
                    child_first[at + c] = cut
                for c in range(fanout):
                    children[at + c] = base | np.uint64(c)
                splits += 1
            else:
                leaf_depths[leaves] = k
                leaf_prefixes[leaves] = active[j]
                leaf_counts[leaves] = count[j]
                leaves += 1
        active = children[:splits * fanout]
        first, end = child_first[:splits * fanout], child_end[:splits * fanout]
        i += 1
    return (leaf_depths[:leaves].copy(), leaf_prefixes[:leaves].copy(),
            leaf_counts[:leaves].copy(), stop)
