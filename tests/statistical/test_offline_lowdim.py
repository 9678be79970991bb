"""Low-dimensional synthesis (diss. Alg 5–7): noise calibration of Alg 6/7 and its accuracy gain.

Fixed keys (deterministic). The covariance and mean noise must have the paper's Laplace scales
(3d²/(εn) off the diagonal, twice that on it; d/(εn) for the mean) times (1 + 1/1024) from the
exact grid; a factor-2 error in either fails the ±35 % bands below (relative s.d. ≤ 0.11).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dpsynth.eval import w1_exact
from dpsynth.noise import KeyedNoise
from dpsynth.offline.lowdim import GRID_REFINEMENT, lowdim_release, private_covariance, private_mean
from dpsynth.offline.pmm import pmm_synthesize

pytestmark = pytest.mark.statistical
INFLATE = 1 + 1 / GRID_REFINEMENT


def key(i: int) -> bytes:
    return hashlib.sha256(f"lowdim-stat-{i}".encode()).digest()


def planar(n: int, seed: int, d: int = 10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(99).normal(size=(d, 2)))[0] * 0.35
    return np.clip(0.5 + (rng.random((n, 2)) - 0.5) @ basis.T + rng.normal(0, 0.01, (n, d)),
                   0, 1)


def test_covariance_noise_has_the_paper_scale() -> None:
    n, d, eps = 1000, 4, 1.0
    x = np.random.default_rng(2).random((n, d))
    cov = np.cov(x, rowvar=False)
    off, diag = [], []
    for i in range(100):
        err = private_covariance(x, eps, KeyedNoise(key(i)))[0] - cov
        off.extend(err[np.triu_indices(d, 1)])
        diag.extend(np.diag(err))
    sigma = 3 * d**2 / (eps * n) * INFLATE
    assert abs(np.var(off) / (2 * sigma**2) - 1) < 0.35
    assert abs(np.var(diag) / (2 * (2 * sigma) ** 2) - 1) < 0.35
    assert abs(np.mean(off)) < 4 * np.sqrt(2 * sigma**2 / len(off))


def test_mean_noise_has_the_paper_scale() -> None:
    n, d, eps = 500, 5, 0.5
    x = np.random.default_rng(3).random((n, d))
    errs = np.concatenate([private_mean(x, eps, KeyedNoise(key(i)))[0] - x.mean(axis=0)
                           for i in range(100)])
    scale = d / (eps * n) * INFLATE
    assert abs(np.var(errs) / (2 * scale**2) - 1) < 0.35


@pytest.mark.slow
def test_lowdim_beats_full_dimensional_pmm_near_a_plane() -> None:
    n = 3000
    low, full = [], []
    for i in range(3):
        x = planar(n, i)
        res = lowdim_release(x, 1.0, key(i))
        assert res.target_dim == 2  # §4.5 sees the plane through the noise
        low.append(w1_exact(x, res.points, max_points=4000).value)
        y = pmm_synthesize(x, 1.0, key(i), neighbours="replace")
        full.append(w1_exact(x, y, max_points=4000).value)
    assert np.median(low) < 0.7 * np.median(full), (low, full)
