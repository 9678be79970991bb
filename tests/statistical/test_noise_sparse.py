"""The sparse discrete Laplace sampler (dpsynth.noise.sparse, docs/privacy.md P2c) against the
law of the dense draws, with fixed keys and stated false-alarm rates.

``discrete_laplace_nonzero(σ, context, n)`` must have the joint law of n iid Lap_Z(σ′) draws
(σ′ = σ rounded up, P2a). Checked here, each at a false alarm ≤ 1e-4 over fresh keys
(chi-square or exact binomial, 13 tests): the values of the whole vector, zeros included,
against the closed form, and the sign; the number of nonzero draws and the gaps between them
against a Bernoulli(π) process; each position's frequency of a nonzero draw across many short
vectors (the ends included). Total ≤ 1.3e-3.
Power: at ¼ of the scale (benchmarks/mutants.py) π falls by orders of magnitude and every
test here fails with p < 1e-100.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from dpsynth.noise import KeyedNoise, effective_scale

pytestmark = pytest.mark.statistical

KEY = bytes(range(32))
ALPHA = 1e-4
#: scales whose π = P(Z ≠ 0) spans the sampler's use (privtree switches at π ≤ 1/4)
SCALES = (0.25, 0.45, 0.7)


def _law(scale: float) -> tuple[float, float]:
    """(p, π) at the effective scale, computed here from the closed form."""
    p = math.exp(-1.0 / float(effective_scale(scale)))
    return p, 2 * p / (1 + p)


def _pooled_chisquare(observed: np.ndarray, expected: np.ndarray) -> float:
    """Pearson p-value after pooling the tail bins (ascending) until each expects ≥ 5."""
    obs, exp, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected, strict=True):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    obs[-1] += acc_o
    exp[-1] += acc_e
    obs_a, exp_a = np.array(obs), np.array(exp)
    stat = float(((obs_a - exp_a) ** 2 / exp_a).sum())
    return float(scipy.stats.chi2.sf(stat, obs_a.size - 1))


@pytest.mark.parametrize("scale", SCALES)
def test_P2c_sparse_values_have_the_dense_law(scale: float) -> None:
    """The full vector (zeros filled in) of 10⁶ draws: chi-square of |z| ∈ {0, 1, …} and of the
    sign against Lap_Z(σ′)."""
    n = 1_000_000
    positions, values = KeyedNoise(KEY).discrete_laplace_nonzero(scale, ("sparse", "v"), n)
    assert np.all(np.diff(positions) > 0) and np.all(values != 0)
    assert positions.size == 0 or (positions[0] >= 0 and positions[-1] < n)
    p, _ = _law(scale)
    top = 60
    magnitude = np.bincount(np.minimum(np.abs(values), top), minlength=top + 1).astype(float)
    magnitude[0] = n - values.size
    k = np.arange(top + 1)
    expected = np.where(k == 0, (1 - p) / (1 + p), 2 * (1 - p) / (1 + p) * p ** k) * n
    expected[top] = 2 * p ** top / (1 + p) * n  # P(|Z| ≥ top)
    assert _pooled_chisquare(magnitude, expected) > ALPHA
    negative = int((values < 0).sum())  # the sign is fair given Z ≠ 0: two-sided binomial
    assert scipy.stats.binomtest(negative, values.size).pvalue > ALPHA


@pytest.mark.parametrize("scale", SCALES)
def test_P2c_sparse_gaps_are_geometric(scale: float) -> None:
    """Zeros before each nonzero draw (the first one's from position 0): P(gap = g) =
    (1 − π)^g π, chi-square; the last partial run is censored and left out. And the number of
    nonzero draws is Binomial(n, π) (two-sided), so a sampler that draws almost none fails."""
    n = 1_000_000
    positions, _ = KeyedNoise(KEY).discrete_laplace_nonzero(scale, ("sparse", "g"), n)
    _, pi = _law(scale)
    assert scipy.stats.binomtest(positions.size, n, pi).pvalue > ALPHA
    gaps = np.diff(np.concatenate([[-1], positions])) - 1
    top = int(math.ceil(30 / pi))
    observed = np.bincount(np.minimum(gaps, top), minlength=top + 1).astype(float)
    g = np.arange(top + 1)
    expected = (1 - pi) ** g * pi * gaps.size
    expected[top] = (1 - pi) ** top * gaps.size
    assert _pooled_chisquare(observed, expected) > ALPHA


def test_P2c_each_position_is_nonzero_with_probability_pi() -> None:
    """4,000 vectors of 48 draws (one context each), σ = 0.45: the count of nonzero draws at
    each position is Binomial(4000, π), independently; the sum of squared standardised
    deviations is χ²(48) (the ends of a vector are where a truncation error would show)."""
    noise, n, runs = KeyedNoise(KEY), 48, 4000
    _, pi = _law(0.45)
    hits = np.zeros(n)
    for r in range(runs):
        positions, _ = noise.discrete_laplace_nonzero(0.45, ("sparse", "pos", r), n)
        hits[positions] += 1
    stat = float(((hits - runs * pi) ** 2 / (runs * pi * (1 - pi))).sum())
    assert scipy.stats.chi2.sf(stat, n) > ALPHA
