"""Sliced lower bound on W1: 1-Lipschitz projections of the two point sets, exact 1-D W1 each.

Layer: eval (POT). Not privacy code: ``numpy.random`` only draws the directions, from ``seed``.
"""

from __future__ import annotations

import numpy as np

from dpsynth._types import Points
from dpsynth.eval.w1 import _as_pair, _check_metric, _rng


def _projections(d: int, n_projections: int, metric: str, seed: int) -> np.ndarray:
    """The d coordinate axes, then ``n_projections`` random directions, as columns (d × k).

    Random directions are Gaussian vectors normalised to unit dual norm: ‖θ‖_1 = 1 for ℓ∞,
    ‖θ‖_2 = 1 for ℓ2. Then |⟨θ, p − q⟩| ≤ ‖θ‖_* ‖p − q‖ = ‖p − q‖ (Hölder).
    """
    g = _rng(seed).standard_normal((d, n_projections))
    dual = np.abs(g).sum(axis=0) if metric == "chebyshev" else np.sqrt((g**2).sum(axis=0))
    return np.concatenate([np.eye(d), g / dual], axis=1)


def w1_sliced_lower(
    x: Points,
    y: Points,
    *,
    n_projections: int = 200,
    seed: int = 0,
    metric: str = "chebyshev",
    reduce: str = "max",
) -> float:
    """Sliced lower bound on W1 between the empirical measures of ``x`` and ``y``.

    For a direction θ with dual norm 1 (‖θ‖_1 = 1 for ℓ∞, ‖θ‖_2 = 1 for ℓ2), the projection
    p ↦ ⟨θ, p⟩ is 1-Lipschitz from (R^d, ``metric``) to R, because |⟨θ, p − q⟩| ≤
    ‖θ‖_1‖p − q‖_∞ (resp. ‖θ‖_2‖p − q‖_2). Pushing any coupling of μ and ν forward gives a
    coupling of the projections that costs no more, so W1(θ#μ, θ#ν) ≤ W1(μ, ν) for each θ
    separately: the maximum over directions, and a fortiori their mean, are deterministic
    lower bounds (no probability involved). Note that the classical sliced distance with unit
    ℓ2 directions bounds the ℓ2 W1 only; for ℓ∞ it is not a valid bound (‖·‖_2 ≥ ‖·‖_∞),
    hence the ℓ1-normalised directions here.

    The directions are the d coordinate axes (each marginal W1 is a lower bound for both
    metrics) plus ``n_projections`` Gaussian directions normalised to unit dual norm. Each
    projection's W1 is exact (POT's ``max_sliced_wasserstein_distance`` with ``p=1`` and these
    directions): ∫_0^1 |F^-1 − G^-1| over the sorted samples, any n, m.

    Parameters
    ----------
    x, y
        Point sets of the same dimension.
    n_projections
        Number of random directions (besides the d axes).
    seed
        Seed of the random directions.
    metric
        ``"chebyshev"`` (ℓ∞) or ``"euclidean"`` (ℓ2): the W1 being bounded.
    reduce
        ``"max"`` (the default: the tightest bound) or ``"mean"`` over all directions (the
        sliced Wasserstein distance; smaller, but smoother across seeds).

    Returns
    -------
    float

    Examples
    --------
    >>> w1_sliced_lower([[0.1, 0.1]], [[0.4, 0.2]])   # the x-axis attains the ℓ∞ distance
    0.3
    """
    xa, ya = _as_pair(x, y)
    _check_metric(metric)
    if reduce not in ("max", "mean"):
        raise ValueError(f"`reduce` ({reduce!r}) must be 'max' or 'mean'")
    if n_projections < 0:
        raise ValueError(f"`n_projections` ({n_projections}) must be non-negative")
    import ot  # lazily: POT is the eval extra's

    theta = _projections(xa.shape[1], n_projections, metric, seed)
    if reduce == "max":  # each projection's W1 exactly (POT's 1-D W_p with p = 1), then the max
        return float(ot.max_sliced_wasserstein_distance(xa, ya, p=1, projections=theta))
    return float(ot.sliced_wasserstein_distance(xa, ya, p=1, projections=theta))
