"""Offline PMM (dissertation Alg 4, corrected per C.13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.offline import pmm_depth, pmm_scales, pmm_synthesize

KEY = bytes(range(32))


@pytest.mark.parametrize("d", [1, 2, 3, 5])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_P7_scales_spend_exactly_epsilon(d: int, epsilon: float) -> None:
    for depth in range(0, 25):
        scales = pmm_scales(depth, d, epsilon)
        assert len(scales) == depth + 1
        assert math.isclose(float(np.sum(1 / scales)), epsilon, rel_tol=1e-12)
        if d >= 2 and depth >= 2:  # noise decays with the level (Cor 3.11)
            assert scales[0] > scales[-1]
        if d == 1:  # Δ_j = 1: the noise does not decay with the level
            assert np.allclose(scales, (depth + 1) / epsilon)


def test_depth_follows_corollary_3_11() -> None:
    assert pmm_depth(1000, 1.0, 2) == 10 and pmm_depth(1000, 1.0, 1) == 9
    assert pmm_depth(3, 0.1, 2) == 0 and pmm_depth(10**9, 1.0, 2) == 20


def test_pmm_is_deterministic_per_key_and_in_bounds() -> None:
    x = np.random.default_rng(0).random((2000, 3))
    a, b = pmm_synthesize(x, 1.0, KEY), pmm_synthesize(x, 1.0, KEY)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, pmm_synthesize(x, 1.0, bytes(32)))
    assert ((a >= 0) & (a <= 1)).all() and a.shape[1] == 3
    assert abs(len(a) - 2000) < 200


def test_replacement_neighbours_halve_the_budget() -> None:
    x = np.random.default_rng(1).random((4000, 2))
    rep = pmm_synthesize(x, 1.0, KEY, neighbours="replace")
    half = pmm_synthesize(x, 0.5, KEY)
    np.testing.assert_array_equal(rep, half)
    with pytest.raises(ConfigError, match="neighbours"):
        pmm_synthesize(x, 1.0, KEY, neighbours="zcdp")
