"""Low-dimensional synthesis (diss. Alg 5–9): budget split, determinism, pieces, refusals."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

import dpsynth.offline.lowdim as lowdim
from dpsynth.errors import BudgetExceededError, ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.offline.lowdim import (
    adaptive_dim,
    lowdim_release,
    lowdim_split,
    lowdim_synthesize,
    private_covariance,
    private_mean,
    projection_cube,
)

KEY = bytes(range(32))


def planar(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(d, 2)))[0] * 0.35
    return np.clip(0.5 + (rng.random((n, 2)) - 0.5) @ basis.T + rng.normal(0, 0.01, (n, d)),
                   0, 1)


def test_split_is_thirds_and_the_whole_spends_epsilon() -> None:
    assert lowdim_split(1.5) == {"covariance": 0.5, "mean": 0.5, "synthesis": 0.5}
    for sub in ("pmm", "psmm"):
        res = lowdim_release(planar(600, 5), 1.5, KEY, 2, subroutine=sub)
        assert res.metadata["subroutine"] == sub
        # every part is computed from the effective scales; the total is ε to rounding
        assert 1.5 * 0.99 <= res.metadata["privacy_loss"] <= 1.5 * (1 + 1e-12)


def test_overspending_split_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lowdim, "lowdim_split",
                        lambda e: {"covariance": e / 2, "mean": e / 2, "synthesis": e / 2})
    with pytest.raises(BudgetExceededError, match="lowdim"):
        lowdim_release(planar(300, 4), 1.0, KEY, 2)


def test_same_key_same_output_other_key_differs() -> None:
    x = planar(800, 6, seed=1)
    a = lowdim_synthesize(x, 1.0, KEY)
    b = lowdim_synthesize(x, 1.0, KEY)
    c = lowdim_synthesize(x, 1.0, bytes(32))
    assert a.tobytes() == b.tobytes()
    assert a.shape != c.shape or a.tobytes() != c.tobytes()


def test_output_in_unit_cube_with_the_requested_dimension() -> None:
    for k in (2, 3):
        res = lowdim_release(planar(1000, 6), 2.0, KEY, k)
        assert res.target_dim == k and res.basis.shape == (6, k)
        assert np.allclose(res.basis.T @ res.basis, np.eye(k))
        assert res.points.shape[1] == 6
        assert ((res.points >= 0) & (res.points <= 1)).all()


def test_private_covariance_is_symmetric_and_close_for_large_n() -> None:
    x = planar(200_000, 4)
    m_hat, loss = private_covariance(x, 1.0, KeyedNoise(KEY))
    assert np.array_equal(m_hat, m_hat.T)
    assert loss == pytest.approx(1.0, rel=1e-2) and loss <= 1.0
    sigma = 3 * 16 / 200_000  # 3d²/(εn)
    assert np.abs(m_hat - np.cov(x, rowvar=False)).max() < 20 * 2 * sigma


def test_private_mean_loss_and_scale() -> None:
    x = planar(10_000, 5)
    mean, loss = private_mean(x, 0.5, KeyedNoise(KEY))
    assert loss == pytest.approx(0.5, rel=1e-2) and loss <= 0.5
    assert np.abs(mean - x.mean(axis=0)).max() < 30 * 5 / (0.5 * 10_000)


def test_adaptive_dim_follows_section_4_5() -> None:
    flat = np.array([0.05, 0.04, 1e-6, 1e-6, 0.0, -1e-4])
    assert adaptive_dim(flat, 1.0, 10_000, max_dim=6) == 2
    iso = np.full(4, 1 / 12)
    assert adaptive_dim(iso, 1.0, 10**6, max_dim=4) == 4
    assert adaptive_dim(iso, 1.0, 10**6, max_dim=3) == 3
    # a negative tail (M̂ need not be PSD) is clipped at 0, not a NaN
    assert adaptive_dim(np.array([0.1, 0.1, -0.5]), 1.0, 100, max_dim=3) in (2, 3)


@pytest.mark.parametrize("region", ["tight", "paper"])
def test_projection_cube_contains_the_projected_hypercube(region: str) -> None:
    rng = np.random.default_rng(4)
    d = 5
    basis = np.linalg.qr(rng.normal(size=(d, 3)))[0]
    centre = rng.random(d)
    lower, side = projection_cube(basis, centre, region)
    corners = np.array(list(product((0.0, 1.0), repeat=d)))
    coords = (corners - centre) @ basis
    assert (coords >= lower - 1e-12).all() and (coords <= lower + side + 1e-12).all()
    if region == "tight":
        paper_lower, paper_side = projection_cube(basis, centre, "paper")
        assert side <= paper_side


def test_refusals() -> None:
    x = planar(100, 4)
    with pytest.raises(ConfigError, match="replace"):
        lowdim_release(x, 1.0, KEY, neighbours="add_remove")
    with pytest.raises(ConfigError, match="target_dim"):
        lowdim_release(x, 1.0, KEY, 5)
    with pytest.raises(ConfigError, match="d >= 2"):
        lowdim_release(x[:, :1], 1.0, KEY)
    with pytest.raises(ConfigError, match="subroutine"):
        lowdim_release(x, 1.0, KEY, subroutine="gan")
