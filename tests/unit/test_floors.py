"""dpsynth.online.guided.floors: the floor of leaves where the guide expects no record
(issue 31)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise
from dpsynth.online.guided.floors import (
    EXPECTED_EMPTY,
    FALSE_LEAVES,
    NEIGHBOURHOOD,
    SIGNIFICANT,
    empty_floor,
    floored_counts,
    guide_expects_empty,
    leaf_guide_mass,
    self_empty,
)


@pytest.mark.parametrize("epsilon", [0.05, 0.36, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("leaves", [1, 30, 1000])
def test_empty_floor_is_the_smallest_integer_within_the_false_leaf_budget(epsilon: float,
                                                                          leaves: int) -> None:
    p = np.exp(-epsilon)
    m = empty_floor(epsilon, leaves)
    assert leaves * p**m / (1 + p) <= FALSE_LEAVES * (1 + 1e-12)
    assert m == 0 or leaves * p ** (m - 1) / (1 + p) > FALSE_LEAVES


def _lap_z_sum_tail(epsilon: float, summed: int) -> np.ndarray:
    """P(S ≥ m), m = 0, 1, …, for S the sum of ``summed`` Lap_Z(1/ε): the pmf convolved
    directly (an independent check of the negative-binomial form in floors)."""
    p = np.exp(-epsilon)
    z = np.arange(-400, 401)
    one = (1 - p) / (1 + p) * p ** np.abs(z)
    pmf = one
    for _ in range(summed - 1):
        pmf = np.convolve(pmf, one)
    centre = (pmf.size - 1) // 2
    return np.cumsum(pmf[::-1])[::-1][centre:]


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("summed", [2, 5, 16])
@pytest.mark.parametrize("tests", [1, 40, 2048])
def test_the_floor_of_a_neighbourhood_sum_is_the_smallest_within_the_budget(
        epsilon: float, summed: int, tests: int) -> None:
    tail = _lap_z_sum_tail(epsilon, summed)
    m = empty_floor(epsilon, tests, summed=summed)
    assert tests * tail[m] <= FALSE_LEAVES * (1 + 1e-9)
    assert m == 0 or tests * tail[m - 1] > FALSE_LEAVES


@pytest.mark.parametrize("epsilon", [0.01, 0.36, 3.0, 30.0])
def test_the_sum_of_one_leaf_has_the_one_leaf_floor(epsilon: float) -> None:
    from dpsynth.online.guided.floors import _sum_floor

    for tests in (1, 30, 1000, 10**6):
        assert _sum_floor(epsilon, tests, 1) == empty_floor(epsilon, tests)


def test_pure_noise_at_large_epsilon_makes_few_neighbourhoods_look_occupied() -> None:
    """A summary without a guide at ε = 5: 2,048 leaves of depth 11, 128 neighbourhoods of 16
    leaves, pure noise, 300 keys. Two SD of a neighbourhood's noise is under one record, and
    one phantom record in a neighbourhood is not rare: with the one-leaf floor (2) as the bar,
    a pair of ±1 draws made ≈ 0.77 neighbourhoods per summary look occupied (≈ 230 here).
    With the bar of the sums, ≤ FALSE_LEAVES per summary are expected (≤ 30 here); the test
    allows 60 (P(Poisson(30) > 60) < 10⁻⁵)."""
    epsilon, leaves, keys = 5.0, 2048, 300
    depths, prefixes = np.full(leaves, 11), np.arange(leaves, dtype=np.uint64)
    noise = KeyedNoise(bytes(32)).discrete_laplace_at(
        1 / epsilon, ("neighbourhoods",), np.arange(leaves * keys), 0).reshape(keys, leaves)
    occupied = sum(int(np.unique(np.flatnonzero(~self_empty(depths, prefixes, row, epsilon, 20))
                                 >> 4).size) for row in noise)
    assert occupied <= 2 * FALSE_LEAVES * keys


def test_pure_noise_keeps_about_the_false_leaf_budget() -> None:
    """2,000 summaries of 200 empty leaves at ε = 0.36 (exact Lap_Z draws): the leaves kept
    per summary average ≤ FALSE_LEAVES (binomial sd of the mean ≈ 0.016)."""
    epsilon, leaves, summaries = 0.36, 200, 2000
    noise = KeyedNoise(bytes(32)).discrete_laplace_at(
        1 / epsilon, ("floors",), np.arange(leaves * summaries), 0).reshape(summaries, leaves)
    kept = [np.count_nonzero(floored_counts(row, np.ones(leaves, bool), epsilon, 2 / epsilon) >
                             2 / epsilon) for row in noise]
    assert np.mean(kept) <= FALSE_LEAVES + 0.05


def test_only_expected_empty_leaves_below_the_floor_are_zeroed() -> None:
    """50 expected-empty leaves (counts −5 … 44) and 50 expected ones (the same counts)."""
    counts = np.tile(np.arange(-5, 45), 2)
    guide = np.repeat([EXPECTED_EMPTY - 0.01, EXPECTED_EMPTY], 50)
    m = empty_floor(0.5, 50)
    assert m > 2 / 0.5  # above the plain floor, so the rule acts
    out = floored_counts(counts, guide < EXPECTED_EMPTY, 0.5, 2 / 0.5)
    assert out[:50].tolist() == [c if c >= m else 0 for c in range(-5, 45)]
    assert out[50:].tolist() == counts[50:].tolist()
    assert out.dtype == counts.dtype
    assert floored_counts(counts, guide < EXPECTED_EMPTY, 0.5, m).tolist() == counts.tolist()


def test_leaf_guide_mass_matches_the_guide_cell_by_cell() -> None:
    """Leaves coarser and finer than the guide's depth (3) against a dense sum at depth 6."""
    rng = np.random.default_rng(1)
    starts = np.array([0, 2, 3, 6])
    density = rng.random(4) * 10
    widths = np.diff(np.append(starts, 8)).astype(float)
    dense = np.repeat(density, widths.astype(int) * 8) / 8  # per depth-6 cell
    depths = np.array([1, 3, 4, 4, 6, 6, 5, 4, 3], np.int64)
    prefixes = np.array([0, 4, 10, 11, 48, 49, 25, 13, 7], np.uint64)
    got = leaf_guide_mass(starts, density, widths, 3, depths, prefixes)
    want = [dense[int(p) << (6 - k):(int(p) + 1) << (6 - k)].sum() for k, p in
            zip(depths, prefixes, strict=True)]
    assert np.allclose(got, want)
    assert np.isclose(got.sum(), (density * widths).sum())  # the leaves partition the cube


def test_a_leafs_neighbourhood_is_its_ancestor_two_levels_up() -> None:
    """A fine guide of few records is zero in most of its fine cells; the neighbourhood (the
    ancestor NEIGHBOURHOOD levels up, or the cube) is what decides "expected empty"."""
    starts, density = np.array([0, 16, 17]), np.array([0.0, 3.0, 0.0])  # depth 5: one cell
    widths = np.diff(np.append(starts, 32)).astype(float)
    depths = np.array([1, 5, 5, 5, 5], np.int64)
    prefixes = np.array([0, 16, 17, 19, 20], np.uint64)
    own = leaf_guide_mass(starts, density, widths, 5, depths, prefixes)
    assert own.tolist() == [0.0, 3.0, 0.0, 0.0, 0.0]
    # the neighbourhoods (up to depth 3; depth 1 goes to the cube) hold 3, 3, 3, 3 and 0
    empty = guide_expects_empty(starts, density, widths, 5, depths, prefixes)
    assert empty.tolist() == [False, False, False, False, True]
    assert NEIGHBOURHOOD == 2


def test_a_summary_without_guide_finds_empty_neighbourhoods_in_its_own_counts() -> None:
    """256 leaves of depth 8 with Lap_Z(1/0.9) noise: records spread 2 a leaf (uniform) leave no
    neighbourhood (16 leaves) below 2 sd; 500 records in 4 leaves leave every neighbourhood
    but theirs expected empty."""
    depths, prefixes = np.full(256, 8), np.arange(256, dtype=np.uint64)
    noise = KeyedNoise(bytes(32)).discrete_laplace_at(1 / 0.9, ("self",), np.arange(256), 0)
    spread = self_empty(depths, prefixes, 2 + noise, 0.9, 20)
    assert not spread.any()
    dense = noise.copy()
    dense[100:104] += 125
    empty = self_empty(depths, prefixes, dense, 0.9, 20)
    assert not empty[96:112].any() and empty[:96].all() and empty[112:].all()


def test_the_guide_resolves_the_siblings_of_a_dense_corner_as_empty() -> None:
    """Guide: 400 records in cell 0 of depth 4, nothing elsewhere. Its path siblings (cells 1,
    2–3 of depth 4, 1 of depth 2 …) are expected empty although their neighbourhoods hold
    the corner; a fine guide of ~0.3 records a cell (uniform) leaves no leaf expected empty."""
    starts, density, widths = np.array([0, 1]), np.array([400.0, 0.0]), np.array([1.0, 15.0])
    depths = np.array([4, 4, 3, 2, 1], np.int64)
    prefixes = np.array([0, 1, 1, 1, 1], np.uint64)
    assert guide_expects_empty(starts, density, widths, 4, depths, prefixes).tolist() == [
        False, True, True, True, True]
    fine = np.where(np.arange(256) % 3 == 0, 1.0, 0.0)  # a record every third cell of depth 8
    depths8, prefixes8 = np.full(256, 8), np.arange(256, dtype=np.uint64)
    assert not guide_expects_empty(np.arange(256), fine, np.ones(256), 8, depths8,
                                   prefixes8).any()
    assert SIGNIFICANT > 1


def test_index_at_is_the_clipped_search_whatever_the_hint() -> None:
    """``guide_mass.index_at`` galloping from any hint gives searchsorted(side="right") − 1
    clipped to [0, n − 1] (so the masses are the same floats as a binary search's)."""
    from dpsynth.online.guided.guide_mass import index_at

    rng = np.random.default_rng(8)
    for _ in range(300):
        n = int(rng.integers(1, 200))
        starts = np.unique(rng.integers(0, 1000, n)).astype(np.float64)
        for x in np.concatenate([rng.uniform(-10, 1010, 20), starts[:5], [starts[-1]]]):
            want = min(max(int(np.searchsorted(starts, x, side="right")) - 1, 0),
                       starts.size - 1)
            for hint in (0, starts.size - 1, int(rng.integers(-3, starts.size + 3))):
                assert index_at(starts, float(x), hint) == want
