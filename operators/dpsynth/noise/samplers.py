"""Exact sampler arithmetic: effective scales, Lap_Z tails and variances, geometric inversion.

Layer: core. Pure functions of public parameters (no key): the scale actually sampled
(σ rounded *up* to a multiple of 1/256, privacy: P2a), closed forms used by counters and
accounting, and the inversion behind the geometric sampler (its deviation bound: P2b).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from dpsynth._types import Counts
from dpsynth.errors import ConfigError

#: Scales are rounded up to a multiple of 1/SCALE_DENOMINATOR so that they are exact rationals.
SCALE_DENOMINATOR = 256
TWO_53 = float(1 << 53)


def effective_scale(scale: float) -> Fraction:
    """The scale actually sampled: ``scale`` rounded up to a multiple of 1/256, as t/s.

    >>> effective_scale(0.5), effective_scale(2.0), effective_scale(1 / 3)
    (Fraction(1, 2), Fraction(2, 1), Fraction(43, 128))
    """
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ConfigError(f"scale ({scale!r}) must be a finite number > 0")
    return _rounded_up(float(scale))


@lru_cache(maxsize=4096)  # exact rational arithmetic, once per distinct public scale
def _rounded_up(scale: float) -> Fraction:
    numerator = math.ceil(Fraction(scale) * SCALE_DENOMINATOR)
    if numerator >= 1 << 40:
        raise ConfigError(f"scale ({scale!r}) must be below 2^32; raise the per-level epsilon")
    return Fraction(numerator, SCALE_DENOMINATOR)


def laplace_tail(scale: float, k: np.ndarray) -> np.ndarray:
    """P(Z ≥ k) for Z ~ Lap_Z(effective_scale(scale)), vectorised over integer ``k``.

    For k ≥ 1 it is p^k/(1+p); for k ≤ 0 it is 1 − p^(1−k)/(1+p), with p = exp(−1/σ).
    """
    sigma = effective_scale(scale)
    log_p = -float(sigma.denominator) / float(sigma.numerator)
    log1p_p = math.log1p(math.exp(log_p))
    k = np.asarray(k, dtype=np.float64)
    upper = np.exp(np.maximum(k, 1.0) * log_p - log1p_p)
    lower = -np.expm1(np.maximum(1.0 - k, 1.0) * log_p - log1p_p)
    return np.where(k >= 1, upper, lower)


def discrete_laplace_variance(scale: float) -> float:
    """Var(Lap_Z(σ)) = 2p/(1−p)^2 with p = exp(−1/σ), at the effective scale."""
    p = _decay(scale)
    return 2.0 * p / (1.0 - p) ** 2


def discrete_laplace_mean_abs(scale: float) -> float:
    """E|Lap_Z(σ)| = 2p/(1−p²) with p = exp(−1/σ) (= 1/sinh(1/σ)), at the effective scale:
    ≈ σ for large σ, ≈ 2e^{−1/σ} → 0 for small σ, where the integer noise is almost always 0."""
    p = _decay(scale)
    return 2.0 * p / (1.0 - p * p)


def _decay(scale: float) -> float:
    """p = exp(−1/σ) of Lap_Z(σ) at the effective scale σ (P(Z = z) ∝ p^|z|)."""
    return _decay_at(effective_scale(scale))


@lru_cache(maxsize=4096)  # read per summary at every release: once per distinct scale
def _decay_at(sigma: Fraction) -> float:
    """:func:`_decay` of an effective scale."""
    return math.exp(-float(sigma.denominator) / float(sigma.numerator))


_GEOMETRIC_CAP = float(1 << 62)


def geometric_from_uniform(raw: np.ndarray, p: np.ndarray) -> Counts:
    """G = ⌊ln(raw/2^53) / ln(1−p)⌋ for raw in [1, 2^53]; exposed so tests can bound its pmf."""
    u = raw.astype(np.float64) / TWO_53
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.floor(np.log(u) / np.log1p(-p))
    g = np.where(p >= 1.0, 0.0, g)
    g = np.where((p <= 0.0) | ~np.isfinite(g) | (g > _GEOMETRIC_CAP), _GEOMETRIC_CAP, g)
    return np.maximum(g, 0.0).astype(np.int64)
