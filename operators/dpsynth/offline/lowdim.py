"""Low-dimensional synthetic data via private PCA: dissertation Alg 5–9, corrected per C.13.

Layer: core. Alg 5 on X ∈ ([0,1]^d)^n, budget ε/3 + ε/3 + ε/3 (checked by
:func:`dpsynth.accounting.check_composition` from the scales actually drawn):

1. Alg 6, private centred covariance: M = (1/(n−1)) Σ (X_i − X̄)(X_i − X̄)^T (4.1) plus a
   symmetric Laplace matrix, scale σ = 3d²/(εn) off the diagonal and 2σ on it (the text calls
   the scale a "variance parameter", C.13). Per-entry sensitivity 6/n (Prop 4.2's bound).
2. Alg 7, noisy projection: top-d′ eigenvectors V̂ of M̂ (largest *algebraic* eigenvalues: M̂
   need not be PSD, C.13) and the private mean X̄_priv = X̄ + λ, λ_i ~ Lap(d/(εn)) (ℓ1
   sensitivity d/n; Alg 7's scale, not Prop 4.4's 1/(εn), C.13). Coordinates a_i =
   V̂^T (X_i − X̄_priv).
3. Alg 8 (d′ = 2: PMM, :func:`dpsynth.offline.pmm.pmm_synthesize`, with the *normalised* σ_j of
   (3.7), not Alg 8's un-normalised ones that overspend ≈ 6.3×, and the consistent counts m_θ,
   not n′_θ, C.13) or Alg 9 (d′ ≥ 3: PSMM, :mod:`dpsynth.offline.psmm`, the corrected LP) on the
   coordinates, rescaled from a public cube to [0,1]^d′.
4. X″ = X̄_priv + V̂ a′ (re-centring), 5. Y = clip(X″, 0, 1) (ℓ∞ metric projection).

The cube of step 3: Alg 8 takes [−R, R]^d′ with R = √d + ‖X̄_priv‖₂ (4.17; "Σ a_i² ≤ R²", not
"≤ R", C.13); ``region="paper"`` does that. The default ``region="tight"`` takes the smallest
cube containing the image of [0,1]^d under a ↦ V̂^T(x − X̄_priv), which is computed from the
private V̂ and X̄_priv only (the support function of the box), so it is equally public and
contains every point, and it is up to ~√d smaller. Alg 9's lattice is replaced by the dyadic
grid of PSMM on that cube: every point falls in some cell (the text's ball lattice misses points
near the boundary, C.13), and the ℓ∞ LP has the exact sparse form.

Adaptive d′ (§4.5): d′ = argmin_{2≤k≤d} √(max(Σ_{i>k} λ_i(M̂), 0)) + √(d/k)(εn)^{−1/k}
(the printed rule has d′ inside the argmin, and the tail sum is clipped at 0, C.13). It is a
function of M̂ only, so it costs nothing. ``max_dim`` caps it (PSMM's LP size).

Continuous noise, exactly: no float Laplace is drawn. A real query q (an entry of M or of X̄)
with sensitivity Δ is released as g·(⌊q/g⌋ + Z) + g/2 with g = Δ/K (K = 1024) and Z ~ exact
Lap_Z(s). ⌊q/g⌋ has integer sensitivity ⌈Δ/g⌉ ≤ K + 1 (one more for float rounding), so the
release is (K + 1)/s-DP by the integer Laplace mechanism (Lemma 2.5, integer form). With
relative weights w (2 on M's diagonal, 1 elsewhere) s_i = (K + 1)·Σ_j(1/w_j)·w_i/ε_part, so each
part spends exactly its ε/3 (recomputed from the sampler's effective scales and checked); in
real units the noise scale is the paper's (3d²/(εn), resp. d/(εn)) times (1 + 1/K).

Privacy: ε-DP under **replacement** of one record with n public — the neighbour notion of the
proofs of Prop 4.2 and 4.9 (X_k replaced by X′_k) and of the online engine. Alg 6/7's noise
scales depend on n, so add/remove neighbours are not covered and are refused. The synthesis
step sees the projected data, where a replacement changes one point: PMM and PSMM run with
``neighbours="replace"`` (ε/3 → Lap_Z calibrated to ε/6 per changed cell, docs/algorithms.md C.9).

Byte-identical on every CPU: the covariance, the eigenpairs and the projections are computed in
a fixed order (:mod:`dpsynth.offline._linalg`), never by BLAS/LAPACK, whose per-CPU kernels
changed the last bits of a release between machines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpsynth._types import Points
from dpsynth.accounting import check_composition, laplace_loss
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, effective_scale
from dpsynth.offline._linalg import covariance, matmul, symmetric_eigh
from dpsynth.offline.pmm import checked_input, pmm_depth, pmm_scales, pmm_synthesize
from dpsynth.offline.psmm import MAX_GRID_CELLS, psmm_measure

#: Grid refinement of the exact-Laplace discretisation: g = sensitivity / K.
GRID_REFINEMENT = 1024
#: Default cap on an adaptive d′ (PSMM's LP grows like 3^d′ per cell).
MAX_ADAPTIVE_DIM = 3
REGIONS = ("tight", "paper")
SUBROUTINES = ("auto", "pmm", "psmm")


def lowdim_split(epsilon: float) -> dict[str, float]:
    """Alg 5's budget split: ε/3 for the covariance, the mean and the synthesis each."""
    return {"covariance": epsilon / 3, "mean": epsilon / 3, "synthesis": epsilon / 3}


def _grid_laplace(values: np.ndarray, sensitivity: float, weights: np.ndarray, epsilon: float,
                  noise: KeyedNoise, context: tuple[int | str, ...]) -> tuple[np.ndarray, float]:
    """Release real ``values`` (each with the given sensitivity) with noise scale ∝ ``weights``.

    Integer scale s_i = c·w_i with c chosen so Σ_i (K+1)/s_i = ε; returns the released values
    and the loss computed from the effective (rounded-up) scales.
    """
    grid = sensitivity / GRID_REFINEMENT
    integer_sens = GRID_REFINEMENT + 1
    c = integer_sens * float(np.sum(1.0 / weights)) / epsilon
    scales = c * weights
    q = np.floor(values / grid)
    out = np.empty_like(values)
    for w in np.unique(weights):
        idx = np.flatnonzero(weights == w)
        z = noise.discrete_laplace_at(float(c * w), (*context, "w", str(float(w))),
                                      idx.astype(np.uint64), 0)
        out[idx] = grid * (q[idx] + z) + grid / 2
    loss = laplace_loss([float(integer_sens)] * scales.size,
                        [float(effective_scale(float(s))) for s in scales])
    return out, loss


def private_covariance(x: Points, epsilon: float, noise: KeyedNoise,
                       context: tuple[int | str, ...] = ("lowdim", "cov")
                       ) -> tuple[np.ndarray, float]:
    """Alg 6: M̂ = M + A (symmetric; scale 2σ on the diagonal, σ off it); returns (M̂, loss)."""
    n, d = x.shape
    cov = covariance(np.ascontiguousarray(x, dtype=np.float64))
    iu = np.triu_indices(d)
    weights = np.where(iu[0] == iu[1], 2.0, 1.0)  # A_ii = 2λ_ii
    released, loss = _grid_laplace(cov[iu], 6.0 / n, weights, epsilon, noise, context)
    m_hat = np.zeros((d, d))
    m_hat[iu] = released
    m_hat = m_hat + np.triu(m_hat, 1).T
    return m_hat, loss


def private_mean(x: Points, epsilon: float, noise: KeyedNoise,
                 context: tuple[int | str, ...] = ("lowdim", "mean")) -> tuple[np.ndarray, float]:
    """Alg 7's X̄ + λ, λ_i ~ Lap(d/(εn)) (on the exact grid); returns (X̄_priv, loss)."""
    n, d = x.shape
    return _grid_laplace(x.mean(axis=0), 1.0 / n, np.ones(d), epsilon, noise, context)


def adaptive_dim(eigenvalues: np.ndarray, epsilon: float, n: int, max_dim: int) -> int:
    """§4.5: argmin_{2≤k≤min(d, max_dim)} √(max(Σ_{i>k} λ_i, 0)) + √(d/k)(εn)^(−1/k)."""
    lam = np.sort(np.asarray(eigenvalues, np.float64))[::-1]
    d = lam.size
    ks = np.arange(2, min(d, max_dim) + 1)
    tails = np.array([max(float(lam[k:].sum()), 0.0) for k in ks])
    score = np.sqrt(tails) + np.sqrt(d / ks) * (epsilon * n) ** (-1.0 / ks)
    return int(ks[int(np.argmin(score))])


def projection_cube(basis: np.ndarray, centre: np.ndarray, region: str) -> tuple[np.ndarray,
                                                                                 float]:
    """Lower corner and side of a public cube containing V̂^T([0,1]^d − centre)."""
    if region == "paper":
        radius = math.sqrt(basis.shape[0]) + math.sqrt(math.fsum(centre * centre))  # (4.17)
        return np.full(basis.shape[1], -radius), 2.0 * radius
    lo = np.minimum(basis * (0.0 - centre)[:, None], basis * (1.0 - centre)[:, None]).sum(0)
    hi = np.maximum(basis * (0.0 - centre)[:, None], basis * (1.0 - centre)[:, None]).sum(0)
    side = float((hi - lo).max()) * (1 + 1e-12)
    return lo - (side - (hi - lo)) / 2, side


@dataclass(frozen=True)
class LowdimResult:
    """Synthetic points (in [0,1]^d) and the public by-products of Alg 5."""

    points: Points
    target_dim: int
    basis: np.ndarray
    centre: np.ndarray
    eigenvalues: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)


def lowdim_release(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    target_dim: int | None = None,
    *,
    neighbours: str = "replace",
    subroutine: str = "auto",
    region: str = "tight",
    max_dim: int = MAX_ADAPTIVE_DIM,
    max_cells: int = MAX_GRID_CELLS,
) -> LowdimResult:
    """ε-DP low-dimensional synthesis (Alg 5); see the module docstring for every choice."""
    if neighbours != "replace":
        raise ConfigError(
            f"neighbours ({neighbours!r}) must be 'replace' for lowdim: Alg 6–7 scale their noise "
            "by the public n (Prop 4.2's proof replaces one record); use pmm or psmm for add/remove"
        )
    if subroutine not in SUBROUTINES or region not in REGIONS:
        raise ConfigError(f"subroutine must be one of {SUBROUTINES} and region one of {REGIONS}")
    x, d = checked_input(points, epsilon, neighbours)
    n = len(x)
    if d < 2 or n < 2:
        raise ConfigError(f"lowdim needs d >= 2 and n >= 2 (got d = {d}, n = {n}); use pmm")
    if target_dim is not None and not 2 <= target_dim <= d:
        raise ConfigError(f"target_dim ({target_dim}) must lie in [2, d = {d}] or be None")
    split = lowdim_split(epsilon)
    noise = KeyedNoise(key)
    m_hat, cov_loss = private_covariance(x, split["covariance"], noise)
    eigenvalues, vectors = symmetric_eigh(m_hat)
    eigenvalues, vectors = eigenvalues[::-1], vectors[:, ::-1]  # largest algebraic first
    k = adaptive_dim(eigenvalues, epsilon, n, max_dim) if target_dim is None else target_dim
    basis = vectors[:, :k]
    centre, mean_loss = private_mean(x, split["mean"], noise)
    lower, side = projection_cube(basis, centre, region)
    unit = np.clip((matmul(x - centre, basis) - lower) / side, 0.0, 1.0)
    use_pmm = subroutine == "pmm" or (subroutine == "auto" and k == 2)
    eps_syn = split["synthesis"]
    if use_pmm:
        synth = pmm_synthesize(unit, eps_syn, key, neighbours="replace",
                               context=("lowdim", "pmm"))
        scales = pmm_scales(pmm_depth(n, eps_syn / 2, k), k, eps_syn / 2)
        syn_loss = laplace_loss([2.0] * scales.size,
                                [float(effective_scale(float(s))) for s in scales])
    else:
        res = psmm_measure(unit, eps_syn, key, neighbours="replace", max_cells=max_cells,
                           context=("lowdim", "psmm"))
        synth, syn_loss = res.points, float(res.metadata["privacy_loss"])
    total = check_composition({"covariance": cov_loss, "mean": mean_loss,
                               "synthesis": syn_loss}, epsilon, name="lowdim (Alg 5)")
    y = np.clip(centre + matmul(lower + synth * side, np.ascontiguousarray(basis.T)), 0.0, 1.0)
    metadata = {"method": "lowdim", "epsilon": float(epsilon), "neighbours": "replace",
                "d": d, "target_dim": k, "adaptive": target_dim is None,
                "subroutine": "pmm" if use_pmm else "psmm", "region": region,
                "budget_split": split, "privacy_loss": total, "n_out": int(len(y))}
    return LowdimResult(y, k, basis, centre, eigenvalues, metadata)


def lowdim_synthesize(
    points: Points | np.ndarray,
    epsilon: float,
    key: bytes,
    target_dim: int | None = None,
    **options: Any,
) -> Points:
    """ε-DP synthetic points in [0,1]^d by Alg 5 (replacement neighbours, n public).

    >>> t = np.random.default_rng(0).random((2000, 1))
    >>> x = np.hstack([t, 1 - t, 0.5 * t, np.full_like(t, 0.3)])
    >>> y = lowdim_synthesize(x, 3.0, bytes(32), target_dim=2)
    >>> y.shape[1], bool(((y >= 0) & (y <= 1)).all()), abs(len(y) - 2000) < 200
    (4, True, True)
    """
    return lowdim_release(points, epsilon, key, target_dim, **options).points
