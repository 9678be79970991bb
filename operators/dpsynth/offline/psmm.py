"""Private Signed Measure Mechanism (PSMM): dissertation Alg 1 with the LP of Alg 2, corrected.

Layer: core. Alg 1: count the points of each cell of a data-independent partition, add
i.i.d. Lap_Z(1/ε) to every count, read the result as a *signed* measure ν on the cell points
y_i, replace it by the d_BL-closest probability measure ν̂ on the same points (Alg 2, a linear
program solved with SciPy's HiGHS) and output copies of the y_i in proportion to ν̂.

Corrections (docs/algorithms.md C.13, all applied here)
-----------------------------------------
* Alg 2 as printed lacks the coupling between nodes: its constraint ``Σ_j (u_ij − u'_ij) + v_i
  + τ_i ≥ ν_i`` lets node i cover a deficit without node j giving up mass. Dualising the primal
  of Prop 3.5 (``max Σ (ν_i − τ_i) f'_i`` s.t. ``f'_i − f'_j ≤ D_ij``, ``0 ≤ f'_i ≤ 2B``) gives
  ``Σ_j (w_ij − w_ji) + v_i + τ_i ≥ ν_i``: w_ij is a flow from i to j at cost D_ij (the
  printed u'_ij is the same variable as w_ji, so one flow per ordered pair suffices), v_i is
  mass removed at i at cost 2B, and the objective sums over all v_i (the printed ``+ 2v_i``
  has lost its Σ). B = diam(Ω) (= 1 on [0,1]^d in ℓ∞; the text assumes diam Ω = 1). The
  variable count is m(m−1) + 2m (the text says both 2m² and 2m² + 2m).
* The optimum equals ``d_BL(ν̂, ν) + B·(ν(Ω) − 1)`` (the constant the text drops).

Exact sparse form for grids
---------------------------
The partition here is a level of the dyadic tree with cubic cells (2^k per side, depth d·k,
Morton order as in :mod:`dpsynth.tree`), y_i the cell centres. Their ℓ∞ distances are the
shortest-path distances of the *king-move* grid graph (each of the 3^d − 1 neighbour moves
costs one spacing h = 2^-k). On a graph metric, a transport on the complete graph can be
re-routed along shortest paths at equal cost and vice versa, so the LP restricted to king moves
has the same optimum as the dense LP: m(3^d − 1) flows instead of m(m − 1). The dense form
(:func:`closest_probability_dense`) is kept for arbitrary supports and to check the sparse one.

Sizes handled: the LP grows with the grid, not with n, so the grid is capped at
``MAX_GRID_CELLS`` = 2^14 cells (reached at d = 2 once εn ≥ 2^13) and ``max_cells`` raises the
cap (solve times and memory per grid size: docs/benchmarks.md, "Offline mechanisms"). The dense
form handles up to ``MAX_DENSE_POINTS`` points. Beyond the cap the grid stops refining (Cor 3.7's
m = ⌈εn⌉ is not followed), so the accuracy stops improving with n.

Output size: Alg 1 step 5 picks rational r_i ≈ ν̂_i; we round ``n_out·ν̂`` by largest remainders
(ties by cell index), which moves at most m/n_out of mass.

Privacy: the noisy count vector is ε-DP under **add/remove** of one record (one cell changes by
1, Prop 3.4); everything after it is post-processing. The text normalises by n, which is not
public under add/remove; we normalise by the noisy total ``max(Σ_i (n_i + λ_i), 1)``.
``neighbours="replace"`` (two cells change: the online engine's notion, docs/algorithms.md C.9) uses
Lap_Z(2/ε) and the public n. The grid resolution needs n, private under add/remove: it comes
from ``side_bits``, a public ``size_hint``, or a noisy n bought with 5 % of ε
(:func:`dpsynth.offline.pmm.resolution_size`), as for offline PMM's depth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from dpsynth._types import Points
from dpsynth.accounting import check_composition, laplace_loss
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, effective_scale
from dpsynth.offline.pmm import checked_input, resolution_size
from dpsynth.tree import leaf_bounds, route

NEIGHBOURS = ("add_remove", "replace")
#: Default cap on the number of grid cells (the LP has about 3^d·m variables).
MAX_GRID_CELLS = 1 << 14
#: SciPy's HiGHS, interior point + crossover: faster than the default simplex on these LPs
#: (docs/benchmarks.md, "Offline mechanisms"), same optimum (a vertex, thanks to the crossover).
LP_METHOD = "highs-ipm"
#: The dense LP has m(m − 1) + 2m variables: refuse beyond this many support points.
MAX_DENSE_POINTS = 1500


@dataclass(frozen=True)
class LpSolution:
    """Optimum of the corrected Alg 2: the probability measure τ and the d_BL distance to ν."""

    tau: np.ndarray
    objective: float
    distance: float
    variables: int


def _solve(nu: np.ndarray, src: np.ndarray, dst: np.ndarray, cost: np.ndarray,
           bound: float) -> LpSolution:
    """min Σ_e cost_e w_e + 2B Σ v  s.t.  out_i − in_i + v_i + τ_i ≥ ν_i,  Σ τ = 1,  all ≥ 0."""
    m, e = nu.size, src.size
    rows = np.concatenate([src, dst, np.arange(m), np.arange(m)])
    cols = np.concatenate([np.arange(e), np.arange(e), e + np.arange(m), e + m + np.arange(m)])
    vals = np.concatenate([-np.ones(e), np.ones(e), -np.ones(m), -np.ones(m)])
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(m, e + 2 * m))
    a_eq = sparse.csr_matrix((np.ones(m), (np.zeros(m, np.int64), e + m + np.arange(m))),
                             shape=(1, e + 2 * m))
    c = np.concatenate([cost, np.full(m, 2.0 * bound), np.zeros(m)])
    res = linprog(c, A_ub=a_ub, b_ub=-nu, A_eq=a_eq, b_eq=[1.0], bounds=(0, None),
                  method=LP_METHOD)
    if res.status != 0:
        raise ConfigError(f"the d_BL linear program failed ({res.message}); report this bug")
    tau = np.clip(res.x[e + m:], 0.0, None)
    tau /= tau.sum()
    objective = float(res.fun)
    return LpSolution(tau, objective, objective - bound * (float(nu.sum()) - 1.0), c.size)


def closest_probability_dense(nu: np.ndarray, dist: np.ndarray, bound: float = 1.0) -> LpSolution:
    """d_BL-closest probability measure to the signed ``nu`` on m points (corrected Alg 2).

    ``dist`` is the m×m distance matrix of the support, ``bound`` = diam(Ω) (f ∈ [−B, B]).

    >>> sol = closest_probability_dense(np.array([0.7, -0.1, 0.5]), np.array(
    ...     [[0, .5, 1], [.5, 0, .5], [1, .5, 0]]))
    >>> sol.tau.round(3).tolist(), round(sol.distance, 3)
    ([0.6, 0.0, 0.4], 0.15)
    """
    nu = np.asarray(nu, dtype=np.float64)
    m = nu.size
    if m > MAX_DENSE_POINTS:
        raise ConfigError(f"dense LP with m = {m} points must have m <= {MAX_DENSE_POINTS}; "
                          "use a grid support (closest_probability_grid)")
    src, dst = np.nonzero(~np.eye(m, dtype=bool))
    return _solve(nu, src, dst, np.asarray(dist, np.float64)[src, dst], bound)


def king_edges(grid: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Directed king-move edges between the cells whose integer grid coordinates are ``grid``.

    ``grid[c]`` is the d-vector of cell c in {0..side−1}^d; returns (source, target) cell ids.
    """
    m, d = grid.shape
    flat = np.ravel_multi_index(tuple(grid.T), (side,) * d)
    cell_of = np.empty(side**d, dtype=np.int64)
    cell_of[flat] = np.arange(m)
    src, dst = [], []
    for offset in product((-1, 0, 1), repeat=d):
        if not any(offset):
            continue
        moved = grid + np.array(offset)
        ok = ((moved >= 0) & (moved < side)).all(axis=1)
        src.append(np.flatnonzero(ok))
        dst.append(cell_of[np.ravel_multi_index(tuple(moved[ok].T), (side,) * d)])
    return np.concatenate(src), np.concatenate(dst)


def grid_of_cells(side_bits: int, d: int) -> np.ndarray:
    """Integer grid coordinates (2^d·side_bits × d) of the tree cells at depth d·side_bits."""
    cells = np.arange(1 << (d * side_bits), dtype=np.uint64)
    lower, _ = leaf_bounds(cells, d=d, depth=d * side_bits)
    return np.rint(lower * (1 << side_bits)).astype(np.int64)


def closest_probability_grid(nu: np.ndarray, side_bits: int, d: int,
                             bound: float = 1.0) -> LpSolution:
    """Corrected Alg 2 for cell centres of the depth-d·k tree level (Morton order), sparse form.

    Same optimum as :func:`closest_probability_dense` with ℓ∞ distances (module docstring).
    """
    nu = np.asarray(nu, dtype=np.float64)
    if nu.size != 1 << (d * side_bits):
        raise ConfigError(f"nu must hold 2^(d·side_bits) = {1 << (d * side_bits)} masses")
    src, dst = king_edges(grid_of_cells(side_bits, d), 1 << side_bits)
    return _solve(nu, src, dst, np.full(src.size, 2.0**-side_bits), bound)


def round_measure(tau: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` closest to total·τ (largest remainder, ties by index).

    >>> round_measure(np.array([0.5, 0.25, 0.25]), 3).tolist()
    [1, 1, 1]
    """
    exact = np.asarray(tau, np.float64) * total
    counts = np.floor(exact).astype(np.int64)
    short = int(total - counts.sum())
    if short > 0:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:short]] += 1
    return counts


def psmm_side_bits(n: int, epsilon: float, d: int, max_cells: int = MAX_GRID_CELLS) -> int:
    """k with 2^(d·k) ≈ εn cells (Cor 3.7: m = ⌈εn⌉), at least 1 and 2^(d·k) ≤ max_cells."""
    k = round(math.log2(max(epsilon * n, 2.0)) / d)
    cap = int(math.log2(max(max_cells, 2))) // d
    return int(max(1, min(k, cap)))


@dataclass(frozen=True)
class PsmmResult:
    """A PSMM output in compact form: counts per cell centre (Morton order) and the LP result."""

    d: int
    side_bits: int
    leaf_counts: np.ndarray
    lp: LpSolution
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def depth(self) -> int:
        """Tree depth of the cells (d·side_bits)."""
        return self.d * self.side_bits

    @property
    def points(self) -> Points:
        """The synthetic points: leaf_counts[c] copies of the centre of cell c."""
        occupied = np.flatnonzero(self.leaf_counts)
        lower, upper = leaf_bounds(occupied, d=self.d, depth=self.depth)
        return np.repeat((lower + upper) / 2, self.leaf_counts[occupied], axis=0)


def psmm_measure(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    *,
    neighbours: str = "add_remove",
    side_bits: int | None = None,
    max_cells: int = MAX_GRID_CELLS,
    n_out: int | None = None,
    context: tuple[int | str, ...] = ("psmm",),
    size_hint: int | None = None,
) -> PsmmResult:
    """ε-DP PSMM (Alg 1 + corrected Alg 2) on [0,1]^d with ℓ∞; see the module docstring.

    Noise: Lap_Z(1/ε) (add/remove) or Lap_Z(2/ε) (replace) at addresses
    ((*context, "cell", k), stream = Morton cell, event 0).
    """
    pts, d = checked_input(points, epsilon, neighbours)
    n = len(pts)
    sensitivity = 2.0 if neighbours == "replace" else 1.0  # C.9: two cells change on replace
    size, eps_counts = float(n), epsilon
    if side_bits is None:  # the grid needs n, private under add/remove (offline.resolution_size)
        size, eps_counts = resolution_size(n, epsilon, neighbours, size_hint, KeyedNoise(key),
                                           context)
    scale = sensitivity / eps_counts
    loss = laplace_loss([sensitivity], [float(effective_scale(scale))])
    spent = {"counts": loss, "size": epsilon - eps_counts}
    check_composition(spent, epsilon, name="PSMM")
    per_cell_eps = 1.0 / scale
    k = (psmm_side_bits(int(size), per_cell_eps, d, max_cells) if side_bits is None
         else int(side_bits))
    if k < 1 or (1 << (d * k)) > max(max_cells, 2):
        raise ConfigError(f"side_bits ({k}) must be >= 1 with 2^(d·side_bits) <= max_cells "
                          f"({max_cells}); lower side_bits or raise max_cells")
    depth = d * k
    true = np.bincount(route(pts, depth=depth).astype(np.int64), minlength=1 << depth)
    cells = np.arange(1 << depth, dtype=np.uint64)
    lam = KeyedNoise(key).discrete_laplace_at(scale, (*context, "cell", k), cells, 0)
    noisy = true + lam  # privacy: the only data access (Prop 3.4)
    total = n if neighbours == "replace" else max(int(noisy.sum()), 1)
    lp = closest_probability_grid(noisy / total, k, d)
    size = total if n_out is None else int(n_out)
    if size < 1:
        raise ConfigError(f"n_out ({size}) must be >= 1")
    metadata = {"method": "psmm", "epsilon": float(epsilon), "neighbours": neighbours,
                "d": d, "side_bits": k, "depth": depth, "cells": 1 << depth,
                "noise_scale": scale, "privacy_loss": loss, "n_out": size,
                "lp_variables": lp.variables, "placement": "centre"}
    return PsmmResult(d, k, round_measure(lp.tau, size), lp, metadata)


def psmm_synthesize(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    **options: Any,
) -> Points:
    """ε-DP synthetic points by PSMM: :func:`psmm_measure` materialised at the cell centres.

    >>> x = np.random.default_rng(0).random((400, 2))
    >>> y = psmm_synthesize(x, 1.0, bytes(32))
    >>> y.shape[1], bool(((y > 0) & (y < 1)).all()), abs(len(y) - 400) < 100
    (2, True, True)
    """
    return psmm_measure(points, epsilon, key, **options).points
