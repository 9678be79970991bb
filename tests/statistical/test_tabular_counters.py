"""Tabular counters (issue 7): error variances match their schedules' formulas.

Fixed keys (deterministic). Each check compares the sample variance of the error over N = 20000
independent cells (every cell has its own noise stream) with the formula; the rejection
threshold is 6 standard errors of the sample variance, estimated from the sample's fourth
moment: under the normal approximation a correct implementation fails one of the ~60 checks
with probability below 1e-7. Each test also shows the check has power: the formula with one
noisy sum more or fewer is rejected.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.tabular.counters import Counter

pytestmark = pytest.mark.statistical

KEY = bytes(range(32))
CELLS = 20_000


def _errors(kind: str, steps: int, **kw) -> tuple[Counter, list[np.ndarray]]:
    counter = Counter(kind, CELLS, 1.0, KeyedNoise(KEY), ("stat", kind), **kw)
    x = (np.arange(CELLS) % 3).astype(np.int64)  # known inputs; the error is output − truth
    errors = []
    for tau in range(1, steps + 1):
        errors.append(counter.feed(x) - tau * x)
    return counter, errors


def _check(err: np.ndarray, expected: float) -> float:
    """|s² − σ²| in standard errors of s²."""
    centred = err - err.mean()
    s2 = float(np.mean(centred**2))
    m4 = float(np.mean(centred**4))
    se = math.sqrt(max(m4 - s2 * s2, 1e-12) / err.size)
    return abs(s2 - expected) / se


@pytest.mark.parametrize("kind,kw,steps", [
    ("simple", {}, 12),
    ("block", {"block_size": 4}, 14),
    ("unbounded_block", {}, 22),
])
def test_error_variance_matches_formula(kind, kw, steps):
    counter, errors = _errors(kind, steps, **kw)
    v = discrete_laplace_variance(counter.scale)
    ends = counter.block_ends(steps)
    for tau, err in enumerate(errors, start=1):
        if kind == "simple":
            n_sums = tau
        else:
            last = max([e for e in ends if e <= tau], default=0)
            n_sums = sum(e <= tau for e in ends) + (tau - last)
        assert counter.error_variance(tau) == pytest.approx(n_sums * v)
        assert _check(err, n_sums * v) < 6.0, (kind, tau)
        assert abs(float(err.mean())) < 6.0 * math.sqrt(n_sums * v / CELLS)  # unbiased
        if n_sums > 1:  # power: one noisy sum fewer (or more) is detected
            assert _check(err, (n_sums - 1) * v) > 6.0
            assert _check(err, (n_sums + 1) * v) > 6.0


def test_block_counters_beat_simple_late():
    """Simple's variance grows like τ, the unbounded block counter's like τ^{2/3} (≈ 1.5 τ^{2/3}
    noisy sums of Var(Lap(2/ε))): near τ = 60 they cross, by τ = 1000 block is 2× better."""
    simple = Counter("simple", 1, 1.0, KeyedNoise(KEY), ("x",))
    block = Counter("unbounded_block", 1, 1.0, KeyedNoise(KEY), ("y",))
    assert block.error_variance(10) > simple.error_variance(10)
    assert 2 * block.error_variance(1000) < simple.error_variance(1000)
