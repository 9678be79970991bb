"""Issue 17's measurements (docs/tabular.md T6, T18): the noise the cyclic schedule's counters
add is calibrated to the configured ε, and counter shares estimate proportions without bias.

Fixed keys (deterministic). Thresholds are 6 standard errors of the statistic (the sample
variance's from the sample's fourth moment; the mean's from the sample variance): under the
normal approximation a correct implementation fails a check with probability below 1e-8.
Each test shows power: the noise scale ×0.25 (or ×2) is rejected.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.tabular import Domain, TabularSynthesizer
from dpsynth.tabular.counters import Counter
from dpsynth.tabular.shares import counter_shares

pytestmark = pytest.mark.statistical

DOM = Domain.from_dict({"a": 3, "b": 4, "c": 2, "d": 5})  # 6 workloads, 12–20 cells each


def _z_variance(err: np.ndarray, expected: float) -> float:
    """|s² − σ²| in standard errors of s²."""
    centred = err - err.mean()
    s2 = float(np.mean(centred**2))
    se = math.sqrt(max(float(np.mean(centred**4)) - s2**2, 1e-12) / err.size)
    return abs(s2 - expected) / se


@pytest.mark.parametrize(("epsilon", "k", "neighbours"),
                         [(1.0, 2, "add_remove"), (4.0, 3, "add_remove"), (0.5, 1, "replace")])
def test_cyclic_measurements_carry_the_configured_noise(epsilon, k, neighbours):
    """One step under 300 keys: each workload measured at step 1 (the schedule's first k) holds
    q_j(∇f_1) + Lap_Z(s/ε_meas) per cell, ε_meas = (ε − ε_n)/k, s = 1 (add/remove, ε_n = 0.1ε)
    or 2 (replace, ε_n = 0). A scale ×0.25 (variance /16) or ×2 is rejected."""
    rng = np.random.default_rng(3)  # public test data, not privacy noise
    batch = np.stack([rng.integers(0, s, 40) for s in DOM.sizes], axis=1)
    errors = []
    for seed in range(300):
        synth = TabularSynthesizer(DOM, epsilon, seed.to_bytes(32, "big"), release_every=40,
                                   workloads_per_step=k, neighbours=neighbours)
        synth.add(batch)
        synth.step()
        for j in synth.last_selected:
            truth = synth.workloads.answer(batch, j)
            errors.append(synth.counters[j].value - truth)
    err = np.concatenate(errors).astype(np.float64)
    s = 2.0 if neighbours == "replace" else 1.0
    eps_meas = (epsilon - (0.1 * epsilon if neighbours == "add_remove" else 0.0)) / k
    scale = s / eps_meas
    assert abs(err.mean()) < 6 * math.sqrt(discrete_laplace_variance(scale) / err.size)
    assert _z_variance(err, discrete_laplace_variance(scale)) < 6
    for wrong in (0.25 * scale, 2.0 * scale):  # power: a miscalibrated scale is rejected
        assert _z_variance(err, discrete_laplace_variance(wrong)) > 6


def test_counter_shares_are_unbiased_proportions():
    """A counter fed 25 inputs of 200 records with proportions (0.5, 0.3, 0.15, 0.05), ε = 0.5,
    under 400 keys: the mean share per cell is the proportion within 6 standard errors (the
    ratio estimator's bias, O(1/S) with S ≈ 5000 records, is far below that)."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    x = (200 * p).astype(np.int64)
    shares = []
    for seed in range(400):
        counter = Counter("simple", 4, 0.5, KeyedNoise(seed.to_bytes(32, "big")), ("share",))
        for _ in range(25):
            counter.feed(x)
        share, rho, fed = counter_shares([counter])
        assert fed.tolist() == [True] and 0 < rho[0] < 5000
        shares.append(share)
    shares = np.array(shares)
    se = shares.std(axis=0, ddof=1) / math.sqrt(len(shares))
    assert np.all(np.abs(shares.mean(axis=0) - p) < 6 * se)
    # the spread per key is the noise's: √(25·Var(Lap_Z(2)))/5000 ≈ 0.003 per cell at most
    assert np.all(shares.std(axis=0) < 0.004)
