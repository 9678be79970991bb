"""Offline Private Measure Mechanism (PMM): dissertation Alg 4 with the corrections of C.13.

Layer: core. The baseline every online number is compared with. Same partition
(:mod:`dpsynth.tree`), same consistency (:mod:`dpsynth.consistency`) and same placement
(:mod:`dpsynth.release.model`) as the online engine. Depth r = ⌈log2(εn)⌉ for d ≥ 2 and
⌈log2(εn)⌉ − 1 for d = 1 (Cor 3.11, rounded up); every node of levels 0..r, root included, gets
Lap_Z(σ_j) with the *normalised* magnitudes of (3.7): Δ_j = Σ_{|θ|=j} diam(Ω_θ) = 2^{j−⌊j/d⌋},
Δ_{−1} = Δ_0 = 1, S = Σ_{j=0}^r √Δ_{j−1}, σ_j = S/(ε √Δ_{j−1}), so Σ_j 1/σ_j = ε exactly (the
un-normalised magnitudes of Alg 8 overspend, C.13). The output size m = max(n + λ_∅, 0) is random.

Privacy: ε-DP under add/remove of one record (one cell per level changes, Thm 3.8). Under
replacement two cells per level change, so ``neighbours="replace"`` runs at ε/2
(docs/algorithms.md C.9).
"""

from __future__ import annotations

import math

import numpy as np

from dpsynth._types import CellIds, Counts, Points
from dpsynth.consistency import make_consistent
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, encode_context
from dpsynth.release import place_points
from dpsynth.tree import route, validate_points

NEIGHBOURS = ("add_remove", "replace")
#: Under add/remove without a public size: the share of ε spent on a noisy n for the resolution.
SIZE_SHARE = 0.05


def resolution_size(
    n: int, epsilon: float, neighbours: str, size_hint: int | None, noise: KeyedNoise,
    context: tuple[int | str, ...],
) -> tuple[float, float]:
    """(n for choosing a depth or grid, ε left for the counts) — the size is private under
    add/remove, so it is never read there.

    replace: n is public. add/remove with ``size_hint`` (a public bound or estimate, e.g. the
    expected batch size): the hint. add/remove without: n + Lap_Z(1/(SIZE_SHARE·ε)), which
    spends SIZE_SHARE·ε of the budget (basic composition; the counts get the rest).
    """
    if neighbours == "replace":
        return float(n), epsilon
    if size_hint is not None:
        if size_hint < 0:
            raise ConfigError(f"size_hint ({size_hint}) must be >= 0")
        return float(size_hint), epsilon
    spent = SIZE_SHARE * epsilon
    lap = noise.discrete_laplace_at(1.0 / spent, (*context, "size"), 0, 0)[0]
    return float(max(n + int(lap), 1)), epsilon - spent  # privacy: P7 (resolution from noise)


def checked_input(
    points: Points | np.ndarray, epsilon: float, neighbours: str
) -> tuple[Points, int]:
    """The points as n×d in [0,1] and d, after refusing a bad notion, ε or shape (fix named)."""
    if neighbours not in NEIGHBOURS:
        raise ConfigError(f"neighbours ({neighbours!r}) must be one of {NEIGHBOURS}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"epsilon ({epsilon!r}) must be a finite number > 0")
    arr = np.asarray(points, dtype=np.float64)
    d = arr.shape[1] if arr.ndim == 2 else 1
    pts, _ = validate_points(arr, d)
    return pts, d


def noisy_levels(
    address: CellIds,
    depth: int,
    scales: np.ndarray,
    noise: KeyedNoise,
    context: tuple[int | str, ...],
    levels: range,
    weights: Counts | None = None,
) -> list[Counts]:
    """PMM's measurements: for each level j in ``levels``, the (weighted) counts of its 2^j cells
    from addresses at ``depth``, plus Lap_Z(σ_j) at ((*context, "level", j), cell, event 0)."""
    out = []
    for j in levels:
        cells = (address >> np.uint64(depth - j)).astype(np.int64)
        true = np.bincount(cells, weights=weights, minlength=1 << j).astype(np.int64)
        lam = noise.discrete_laplace_at(float(scales[j]), (*context, "level", j),
                                        np.arange(1 << j, dtype=np.int64), 0)
        out.append(true + lam)
    return out


def pmm_depth(n: int, epsilon: float, d: int, max_depth: int = 20) -> int:
    """r = ⌈log2(εn)⌉ (d ≥ 2) or ⌈log2(εn)⌉ − 1 (d = 1), at least 0 and at most max_depth."""
    r = math.ceil(math.log2(max(epsilon * n, 1.0))) - (1 if d == 1 else 0)
    return int(min(max(r, 0), max_depth))


def pmm_scales(depth: int, d: int, epsilon: float) -> np.ndarray:
    """σ_0..σ_r of (3.7), normalised so that Σ 1/σ_j = ε."""
    delta = [1.0] + [2.0 ** (j - j // d) for j in range(depth)]  # Δ_{j−1} for j = 0..r
    roots = np.sqrt(np.array(delta))
    scales: np.ndarray = roots.sum() / (epsilon * roots)
    return scales


def pmm_leaves(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    *,
    neighbours: str = "add_remove",
    max_depth: int = 20,
    context: tuple[int | str, ...] = ("pmm",),
    size_hint: int | None = None,
) -> tuple[int, np.ndarray, bytes]:
    """PMM in compact form: (depth, consistent leaf counts in Morton order, placement seed).

    ``context`` prefixes every noise address (and labels the placement seed), so that callers
    running PMM as a subroutine with the same key (e.g. :mod:`~dpsynth.offline.lowdim`, Alg 8)
    draw noise independent of a plain PMM run; the default keeps the historical addresses. The depth
    r = ⌈log2(εn)⌉ needs n, which is private under add/remove: :func:`resolution_size` uses
    ``size_hint`` (public) or a noisy n bought with 5 % of ε.
    """
    pts, d = checked_input(points, epsilon, neighbours)
    eps = epsilon / 2 if neighbours == "replace" else epsilon  # C.9: two cells per level
    noise = KeyedNoise(key)
    size, eps = resolution_size(len(pts), eps, neighbours, size_hint, noise, context)
    depth = pmm_depth(int(size), eps, d, max_depth)
    scales = pmm_scales(depth, d, eps)
    assert math.isclose(float(np.sum(1 / scales)), eps, rel_tol=1e-12)  # privacy: P7
    address = route(pts, depth=depth)
    levels = noisy_levels(address, depth, scales, noise, context, range(depth + 1))
    noisy = [np.maximum(level, 0) for level in levels]
    root = int(noisy[0][0])
    leaves = make_consistent(root, noisy[1:])[-1] if depth else np.array([root], np.int64)
    label = b"dpsynth.pmm.placement-seed"
    if context != ("pmm",):
        label += b":" + encode_context(context)
    seed = noise.placement_seed(label)
    return depth, leaves, seed


def pmm_synthesize(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    *,
    neighbours: str = "add_remove",
    max_depth: int = 20,
    placement: str = "uniform",
    context: tuple[int | str, ...] = ("pmm",),
    size_hint: int | None = None,
) -> Points:
    """Offline ε-DP synthetic points (m×d) by PMM (dissertation Alg 4, corrected per C.13).

    :func:`pmm_leaves` materialised by :func:`dpsynth.release.model.place_points`.

    Examples
    --------
    >>> x = np.random.default_rng(0).random((500, 2))
    >>> y = pmm_synthesize(x, 1.0, bytes(32))
    >>> y.shape[1], bool(((y >= 0) & (y <= 1)).all()), abs(len(y) - 500) < 100
    (2, True, True)
    """
    arr = np.asarray(points, dtype=np.float64)
    d = arr.shape[1] if arr.ndim == 2 else 1
    depth, leaves, seed = pmm_leaves(arr, epsilon, key, neighbours=neighbours,
                                     max_depth=max_depth, context=context, size_hint=size_hint)
    return place_points(leaves, d=d, depth=depth, placement=placement, placement_seed=seed)
