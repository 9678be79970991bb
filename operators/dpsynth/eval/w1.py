"""Wasserstein-1 between empirical measures: exact, a tree upper bound, a sliced lower bound.

Layer: eval. docs/algorithms.md E.1. The three estimators bracket the
same quantity, W1 between the uniform measures on two point sets ``x`` (n×d) and ``y`` (m×d)
for a ground metric on R^d (ℓ∞ = ``"chebyshev"`` by default, as kasanhyy/PMM and the accuracy
study use; ``"euclidean"`` is allowed):

    w1_sliced_lower(x, y) ≤ w1_exact(x, y) ≤ w1_tree_upper(x, y)

``w1_exact`` solves the transport problem (POT ``ot.emd2``; O(n²) memory, so it subsamples past
``max_points``), the tree bound costs O((n+m)·depth) and scales to 10⁵+ points, and the sliced
bound costs O(k·(n+m) log(n+m)) for k projections. ``iid_floor`` and ``iid_floor_generated``
give the sampling floor every synthetic-data number should be read against.

This module is not privacy code: ``numpy.random`` only picks subsamples and projections, and
every function that draws takes an explicit ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsynth._types import Points
from dpsynth.tree import MAX_TREE_DEPTH, route, splits_per_coordinate

#: Metrics the estimators accept (names as in ``scipy.spatial.distance.cdist`` / ``ot.dist``).
METRICS = ("chebyshev", "euclidean")

#: Default depth cap of the tree bound (route() supports up to 63 levels).
MAX_DEFAULT_DEPTH = 60

@dataclass(frozen=True)
class W1Estimate:
    """An exact W1 value and how it was obtained.

    Attributes
    ----------
    value
        W1 between the empirical measures that were compared.
    method
        ``"emd2"`` (POT network simplex on the cost matrix) or ``"sorted-1d"`` (d = 1: the
        exact sorted-quantile formula, ``scipy.stats.wasserstein_distance``).
    n_used
        Number of points of ``x`` that entered the computation; ``y`` follows the same rule,
        min(m, max_points).
    subsampled
        True when n or m exceeded ``max_points`` and ``value`` is W1 between random subsamples
        (an estimate of the full-sample W1, biased upwards by the extra sampling noise).
    """

    value: float
    method: str
    n_used: int
    subsampled: bool


def _rng(seed: int) -> Any:
    """The eval layer's generator: picks subsamples and projections, never privacy noise."""
    return np.random.default_rng(seed)  # noqa: TID251 (eval layer, not privacy code)


def _as_points(points: Any, name: str) -> Points:
    """``points`` as a non-empty, finite float64 array of shape (n, d); 1-d input means d = 1."""
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"`{name}` (shape {arr.shape}) must be a non-empty (n, d) array")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` must contain only finite coordinates; drop NaN/inf rows")
    return arr


def _as_pair(x: Any, y: Any) -> tuple[Points, Points]:
    """Both point sets, checked to share their dimension."""
    xa, ya = _as_points(x, "x"), _as_points(y, "y")
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"`x` (d={xa.shape[1]}) and `y` (d={ya.shape[1]}) must share d")
    return xa, ya


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"`metric` ({metric!r}) must be one of {METRICS}")


def w1_exact(
    x: Points,
    y: Points,
    *,
    metric: str = "chebyshev",
    max_points: int = 5000,
    seed: int = 0,
) -> W1Estimate:
    """Exact W1 between the uniform empirical measures on ``x`` (n×d) and ``y`` (m×d).

    For d ≥ 2 this solves the transport LP with POT, ``ot.emd2(a, b, M)`` with a = 1/n,
    b = 1/m and M the pairwise ``metric`` distances (docs/algorithms.md E.1: 0.5 s at n = 2000,
    3 s at 4000; M takes 8·n·m bytes). For d = 1 every ℓp metric is |s − t| and the exact
    sorted formula is used (``scipy.stats.wasserstein_distance``), never subsampled.

    When n or m exceeds ``max_points`` (d ≥ 2), each set larger than ``max_points`` is replaced
    by a subsample of exactly ``max_points`` points drawn without replacement with ``seed``, and
    the result says ``subsampled=True``.

    Parameters
    ----------
    x, y
        Point sets of the same dimension d; a 1-d array means d = 1.
    metric
        Ground metric: ``"chebyshev"`` (ℓ∞) or ``"euclidean"`` (ℓ2).
    max_points
        Largest set size solved exactly.
    seed
        Seed of the subsampling.

    Returns
    -------
    W1Estimate

    Examples
    --------
    >>> w1_exact([[0.1, 0.1]], [[0.4, 0.2]]).value   # ℓ∞ distance of two point masses
    0.3
    >>> w1_exact([[0.1, 0.1]], [[0.4, 0.2]], metric="euclidean").value
    0.316...
    >>> w1_exact([0.0, 1.0], [0.5]).method
    'sorted-1d'
    """
    xa, ya = _as_pair(x, y)
    _check_metric(metric)
    if max_points < 1:
        raise ValueError(f"`max_points` ({max_points}) must be at least 1")
    n, m = xa.shape[0], ya.shape[0]
    if xa.shape[1] == 1:
        from scipy.stats import wasserstein_distance

        return W1Estimate(float(wasserstein_distance(xa[:, 0], ya[:, 0])), "sorted-1d", n, False)
    subsampled = n > max_points or m > max_points
    if subsampled:
        rng = _rng(seed)
        if n > max_points:
            xa = xa[rng.choice(n, size=max_points, replace=False)]
        if m > max_points:
            ya = ya[rng.choice(m, size=max_points, replace=False)]
    import ot

    a = np.full(xa.shape[0], 1.0 / xa.shape[0])
    b = np.full(ya.shape[0], 1.0 / ya.shape[0])
    cost = ot.dist(xa, ya, metric=metric)
    value = float(ot.emd2(a, b, cost, numItermax=10_000_000))
    return W1Estimate(max(value, 0.0), "emd2", xa.shape[0], subsampled)


def level_diameters(depth: int, d: int, *, metric: str = "chebyshev") -> np.ndarray:
    """Diameters D_0 ≥ D_1 ≥ … ≥ D_depth of the dyadic round-robin cells of each level.

    A level-j cell has side 2^-⌈(j−i)/d⌉ in coordinate i (:mod:`dpsynth.tree`), so its ℓ∞
    diameter is 2^-⌊j/d⌋ (= :func:`dpsynth.tree.cell_diameter`) and its ℓ2 diameter is the
    norm of the side vector.

    >>> level_diameters(4, 2).tolist()
    [1.0, 1.0, 0.5, 0.5, 0.25]
    """
    _check_metric(metric)
    sides = np.array([2.0 ** -splits_per_coordinate(j, d) for j in range(depth + 1)])
    if metric == "chebyshev":
        return sides.max(axis=1)
    return np.sqrt((sides**2).sum(axis=1))


def default_tree_depth(n: int, m: int, d: int) -> int:
    """Default finest level of the tree bound: ⌈log2 max(n, m)⌉ + d, capped at 60.

    At that depth an average cell holds ≤ 2^-d of the larger sample's points, so almost every
    point is alone in its cell. A deeper tree never loosens the bound (see
    :func:`w1_tree_upper`), it only costs time.

    >>> default_tree_depth(2000, 2000, 2)
    13
    """
    return min(math.ceil(math.log2(max(n, m, 1))) + d, MAX_DEFAULT_DEPTH)


def _signed_weights(n: int, m: int) -> np.ndarray:
    """Integer weights n·m·(μ − ν) of the concatenated points: +m for x, −n for y (exact)."""
    return np.concatenate([np.full(n, m, dtype=np.int64), np.full(m, -n, dtype=np.int64)])


def _abs_group_sums(keys_sorted: np.ndarray, weights_sorted: np.ndarray) -> int:
    """Σ over runs of equal keys of |Σ weights in the run| (keys already sorted)."""
    starts = np.flatnonzero(np.r_[True, keys_sorted[1:] != keys_sorted[:-1]])
    return int(np.abs(np.add.reduceat(weights_sorted, starts)).sum())


def w1_tree_upper(
    x: Points, y: Points, *, depth: int | None = None, metric: str = "chebyshev"
) -> float:
    """Tree (ultrametric) upper bound on W1 between the empirical measures of ``x`` and ``y``.

    Points must lie in [0,1]^d. docs/algorithms.md E.1, with the leaf
    term made exact. Notation: r = ``depth``; level-j cells are those of :mod:`dpsynth.tree`
    (round-robin midpoint splits, Morton addresses from ``route``); D_j = diameter of a level-j
    cell in ``metric`` (ℓ∞: 2^-⌊j/d⌋), non-increasing in j; μ, ν = the empirical measures
    (weights 1/n, 1/m); Δ(A) = μ(A) − ν(A).

    Derivation. Build a weighted tree T: its internal nodes are the cells of levels 0..r, each
    level-j cell has its level-(j+1) halves as children with edge weight (D_j − D_{j+1})/2 ≥ 0,
    and each level-r cell C has one leaf per *distinct* point p ∈ C of x ∪ y, with edge weight
    D_r/2. The path distance between two distinct points p ≠ q whose deepest common cell has
    level k ≤ r is, per side, D_r/2 + Σ_{j=k}^{r−1} (D_j − D_{j+1})/2 = D_k/2, so
    d_T(p, q) = D_k; and d_T(p, p) = 0. Both p and q lie in one level-k cell, whose diameter is
    D_k, so ‖p − q‖ ≤ D_k = d_T(p, q) for every pair: d ≤ d_T pointwise on the support. Hence
    every coupling costs at least as much under d_T as under d, and W1_d(μ, ν) ≤ W1_{d_T}(μ, ν).
    W1 on a tree metric has the closed form Σ_edges w_e·|Δ(subtree below e)| (Evans–Matsen;
    Indyk–Thaper), which here is

        W1_{d_T} = Σ_{j=0}^{r−1} ((D_j − D_{j+1})/2)·Σ_{C ∈ level j+1} |Δ(C)|
                   + (D_r/2)·Σ_{distinct points p} |Δ({p})|.

    The leaf term is at most D_r (Σ_p |Δ({p})| ≤ 2), which gives the cruder bound of
    docs/algorithms.md E.1 (tree W1 + D_r); it is exactly 0 when the two samples coincide as
    multisets, so equal measures give 0. Refining the tree only lowers d_T (a pair that shared
    a level-r cell at cost D_r now costs D_{r+1} ≤ D_r or still D_r), so a larger ``depth`` is
    never looser. All masses are computed exactly in integers (weights +m and −n, divided by
    n·m at the end).

    Parameters
    ----------
    x, y
        Point sets in [0,1]^d of the same dimension.
    depth
        Finest level r; default :func:`default_tree_depth` (⌈log2 max(n, m)⌉ + d, ≤ 60).
    metric
        ``"chebyshev"`` (ℓ∞, D_j = 2^-⌊j/d⌋) or ``"euclidean"`` (ℓ2 diameters of the cells).

    Returns
    -------
    float
        An upper bound on ``w1_exact(x, y, metric=metric)`` (without subsampling).

    Examples
    --------
    >>> w1_tree_upper([[0.1, 0.1]], [[0.9, 0.9]])   # different level-1 cells: D_0 = 1
    1.0
    >>> w1_tree_upper([[0.1, 0.1], [0.6, 0.6]], [[0.6, 0.6], [0.1, 0.1]])
    0.0
    """
    xa, ya = _as_pair(x, y)
    _check_metric(metric)
    for name, arr in (("x", xa), ("y", ya)):
        if arr.min() < 0.0 or arr.max() > 1.0:
            raise ValueError(f"`{name}` must lie in [0,1]^d for the tree bound; rescale it first")
    n, m, d = xa.shape[0], ya.shape[0], xa.shape[1]
    r = default_tree_depth(n, m, d) if depth is None else int(depth)
    if not 0 <= r <= MAX_TREE_DEPTH:
        raise ValueError(f"`depth` ({depth}) must lie in [0, {MAX_TREE_DEPTH}]")
    diam = level_diameters(r, d, metric=metric)
    weights = _signed_weights(n, m)
    # cell masses: sort the finest addresses once; coarser addresses are right shifts of
    # sorted keys, hence still sorted, so each level is one reduceat over runs
    leaf = np.concatenate([route(xa, depth=r), route(ya, depth=r)])
    order = np.argsort(leaf, kind="stable")
    leaf, w_sorted = leaf[order], weights[order]
    total = 0.0
    for j in range(r):  # edge level j -> j+1, masses of the level-(j+1) cells
        keys = leaf >> np.uint64(r - (j + 1))
        total += (diam[j] - diam[j + 1]) / 2.0 * _abs_group_sums(keys, w_sorted)
    # leaf term: masses of the distinct points
    _, inverse = np.unique(np.concatenate([xa, ya]), axis=0, return_inverse=True)
    atoms = np.zeros(int(inverse.max()) + 1, dtype=np.int64)
    np.add.at(atoms, inverse.ravel(), weights)
    total += diam[r] / 2.0 * int(np.abs(atoms).sum())
    return float(total / (n * m))


def iid_floor(
    x: Points,
    *,
    n: int | None = None,
    seed: int = 0,
    metric: str = "chebyshev",
    max_points: int = 5000,
) -> float:
    """Sampling floor of a data set: exact W1 between two disjoint random halves of ``x``.

    Definition: draw a random permutation of ``x`` (``seed``); A = its first n points, B = the
    next n; return ``w1_exact(A, B)``. If the rows of ``x`` are i.i.d. from a law P, A and B are
    two *independent* i.i.d. samples of size n from P, so this is exactly the floor of
    docs/algorithms.md E.1 ("W1 between two independent i.i.d. samples of size n of the same
    law"), with no shared atoms (a bootstrap resample shares atoms with ``x`` and is
    optimistic, docs/algorithms.md E.1). The floor shrinks with n (≈ n^-1/d for d ≥ 3,
    √(log n / n) for d = 2), so compare a W1 between sets of size t against the floor at
    n = t: with only ``len(x)`` points available the largest n is ``len(x) // 2`` (the
    default), which overstates the size-t floor; when the law is known, use
    :func:`iid_floor_generated` instead.

    Parameters
    ----------
    x
        The data set, n_x × d.
    n
        Size of each half, at most ``len(x) // 2``; default ``len(x) // 2``.
    seed
        Seed of the permutation (and of any subsampling in ``w1_exact``).
    metric
        Ground metric, as in :func:`w1_exact`.
    max_points
        Passed to :func:`w1_exact`.

    Returns
    -------
    float
    """
    xa = _as_points(x, "x")
    half = xa.shape[0] // 2
    size = half if n is None else int(n)
    if not 1 <= size <= half:
        raise ValueError(f"`n` ({n}) must lie in [1, len(x) // 2 = {half}]")
    perm = _rng(seed).permutation(xa.shape[0])
    first, second = xa[perm[:size]], xa[perm[size : 2 * size]]
    return w1_exact(first, second, metric=metric, max_points=max_points, seed=seed).value


def iid_floor_generated(
    sampler: Callable[[Any, int], Points],
    n: int,
    *,
    seed: int = 0,
    metric: str = "chebyshev",
    repeats: int = 1,
    max_points: int = 5000,
) -> float:
    """Sampling floor of a known law: exact W1 between two independent samples of size ``n``.

    ``sampler(rng, n)`` must return n i.i.d. points (n × d) of the law, drawing only from the
    ``numpy.random.Generator`` it is given. Each repeat draws two samples from one generator
    seeded by ``seed`` and computes ``w1_exact`` on them in full; the result is the mean over
    ``repeats``. Subsampling would silently give the floor at size ``max_points`` instead of
    ``n``, so for d ≥ 2 an ``n`` above ``max_points`` is an error. docs/algorithms.md E.1
    (ℓ2): uniform on [0,1]², 0.033 at n = 1000, 0.027 at 2000, 0.023 at 4000.

    Parameters
    ----------
    sampler
        ``(rng, n) -> points``.
    n
        Size of each sample.
    seed
        Seed of the generator handed to ``sampler``.
    metric
        Ground metric, as in :func:`w1_exact`.
    repeats
        Number of independent sample pairs to average over.
    max_points
        Largest n solved exactly for d ≥ 2 (the cost matrix takes 8·n² bytes).

    Returns
    -------
    float

    Examples
    --------
    >>> floor = iid_floor_generated(lambda rng, k: rng.random((k, 2)), 200, seed=1)
    >>> 0.0 < floor < 0.2
    True
    """
    if n < 1 or repeats < 1:
        raise ValueError(f"`n` ({n}) and `repeats` ({repeats}) must be at least 1")
    rng = _rng(seed)
    values = []
    for _ in range(repeats):
        first, second = _as_pair(sampler(rng, n), sampler(rng, n))
        if first.shape[1] > 1 and max(first.shape[0], second.shape[0]) > max_points:
            raise ValueError(
                f"`n` ({n}) must not exceed `max_points` ({max_points}) for d ≥ 2: the exact "
                "solver needs O(n²) memory; raise max_points or use w1_tree_upper"
            )
        values.append(w1_exact(first, second, metric=metric, max_points=max_points).value)
    return float(np.mean(values))
