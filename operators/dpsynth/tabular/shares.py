"""Counter shares: each workload's counter read as a sample of the stream, and the replay fit.

Layer: core; post-processing of the counters' outputs and the noisy size (docs/tabular.md T6).

A workload's counter C_i (paper 003 Alg 3) holds the noisy histogram of the steps at which i was
measured. Its **share** ``p̂_i = C_i⁺ / Σ_c C_i⁺`` (negative cells clipped) estimates the workload's
distribution over those steps, and ``Ñ_t · p̂_i`` its answer on f_t: the records fed to C_i act as a
sample of the stream. The denominator is the counter's own noisy total, so no private count is
used: the estimate is a function of ε-DP counter outputs and the noisy size Ñ_t only, valid under
add/remove as under replacement (docs/privacy.md P12).

**Reliability.** With ``S = Σ_c C_i`` records seen (the noisy total, unclipped) and ``V`` the
counter's per-cell error variance (public, from its schedule: :meth:`Counter.error_variance`),
the weight ``ρ_i = S² / (S + V·|q_i|)`` is the sample size discounted by the noise on the |q_i|
cells (an effective sample size). Step ``α_i = damping · ρ_i / max_j ρ_j``.

**Replay fit** (MWEM's replay of every measurement, with damping). From h (g_{t−1} scaled to the
size), ``passes`` sweeps over the fed workloads in index order, each a damped multiplicative
(entropic) projection ``w_x ← w_x · ((Ñ p̂_i[c] + δ) / (q_i[c] + δ))^{α_i}`` on the cell c of
support point x. Damped steps average inconsistent noisy targets instead of letting the last one
win (undamped replay oscillates: docs/tabular.md T6). Compiled (:func:`~dpsynth.tabular.model.
project`; the support is 8192 points × 105 workloads on Adult).
"""

from __future__ import annotations

import numpy as np

from dpsynth.tabular.counters import Counter
from dpsynth.tabular.model import ParticleModel, project


def counter_shares(counters: list[Counter]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every counter's share p̂_i (concatenated, cell order of the workloads), its reliability
    ρ_i, and whether it holds anything (fed at least once with a positive noisy total).

    The share is C_i with negative cells clipped, normalised. The reliability uses the noisy
    total S_i = Σ_c C_i[c] (unbiased): the clipped total would add the positive part of every
    empty cell's noise — thousands of phantom records on a large, rarely measured workload,
    which then weighed like a well-measured one (the effect on the Adult tables:
    docs/benchmarks.md, "Tabular streams")."""
    shares = [np.zeros(c.dim) for c in counters]
    rho = np.zeros(len(counters))
    for i, counter in enumerate(counters):
        if counter.clock == 0:
            continue
        seen = float(counter.value.sum())
        if seen <= 0:
            continue
        clipped = np.maximum(counter.value, 0).astype(np.float64)
        shares[i] = clipped / clipped.sum()
        rho[i] = seen * seen / (seen + counter.error_variance() * counter.dim)
    return np.concatenate(shares), rho, rho > 0


def guide_tables(counters: list[Counter], noise_floor: float = 1.0) -> list[np.ndarray]:
    """Each counter's cells less ``noise_floor`` error standard deviations, clipped at 0 (the
    guides of :meth:`ParticleModel.rejuvenate`): cells that noise alone could fill are empty, so
    a guide on a large, rarely measured workload does not steer moves by noise."""
    out = []
    for counter in counters:
        floor = noise_floor * np.sqrt(counter.error_variance()) if counter.clock else 0.0
        out.append(np.maximum(counter.value - floor, 0.0))
    return out


def fit_shares(model: ParticleModel, weights: np.ndarray, counters: list[Counter],
               total: float, *, passes: int, damping: float) -> np.ndarray:
    """h refitted to every counter's share times ``total`` (mass ``total`` kept); see the module
    docstring. Unfed counters are skipped; with none fed, h is returned unchanged."""
    w = np.asarray(weights, dtype=np.float64)
    shares, rho, fed = counter_shares(counters)
    if not fed.any() or total <= 0 or w.sum() <= 0:
        return w.copy()
    alpha = damping * rho / rho.max()
    return project(model.cells_by_workload(), model.workloads.offsets, w * (total / w.sum()),
                   shares, alpha, float(total), int(passes))
