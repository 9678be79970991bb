"""Offline PMM (dissertation Alg 4, corrected per C.13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.offline.pmm import pmm_depth, pmm_scales, pmm_synthesize

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
    half = pmm_synthesize(x, 0.5, KEY, size_hint=len(x))
    np.testing.assert_array_equal(rep, half)
    with pytest.raises(ConfigError, match="neighbours"):
        pmm_synthesize(x, 1.0, KEY, neighbours="zcdp")


def test_P7_add_remove_never_reads_the_private_size_for_the_depth() -> None:
    """Under add/remove the depth comes from a public hint or a noisy n (5 % of ε): two inputs
    that differ in one record get depths from noisy sizes, and the accounting still sums to ε."""
    from dpsynth.noise import KeyedNoise
    from dpsynth.offline.pmm import SIZE_SHARE, resolution_size

    noise = KeyedNoise(KEY)
    size, rest = resolution_size(4096, 1.0, "add_remove", None, noise, ("pmm",))
    assert rest == pytest.approx(1.0 - SIZE_SHARE)
    assert size != 4096 and abs(size - 4096) < 20 / SIZE_SHARE  # Lap_Z(20): a few scales
    assert resolution_size(4096, 1.0, "add_remove", 5000, noise, ("pmm",)) == (5000.0, 1.0)
    assert resolution_size(4096, 0.5, "replace", None, noise, ("pmm",)) == (4096.0, 0.5)
    # the same noise address for neighbouring inputs: the size moves by exactly one
    other, _ = resolution_size(4097, 1.0, "add_remove", None, noise, ("pmm",))
    assert other - size == 1
