"""Tilted profiles inside a release's coarse cells (dpsynth.online.guided.tilt).

The oracle finds each cell's face neighbours by geometry (the cell one side-length away, located
by routing its centre) and reads masses by interpolation, independently of the module's bit
arithmetic and compiled queries.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.online.guided.tilt import (
    TILT_BITS,
    TILT_LEVEL_RATES,
    TILT_MAX_RATIO,
    TILT_MIN_WEIGHT,
    tilted_density,
)
from dpsynth.tree import leaf_bounds
from tests.support.densities import cell_mass, face_neighbours_by_geometry, random_morton_partition


def _slab(lam: float, u0: float, u1: float) -> float:
    """Mass share of [u0, u1] ⊂ [0, 1] under the density ∝ exp(λ u)."""
    if lam == 0.0:
        return u1 - u0
    return (math.exp(lam * u1) - math.exp(lam * u0)) / math.expm1(lam)


def _rates(starts: np.ndarray, density: np.ndarray, depth: int, k: int, p: int, d: int
           ) -> list[float]:
    """λ per axis of cell (k, p) by the rule of the module docstring, from geometry."""
    own = cell_mass(starts, density, depth, k, p)
    out = []
    for axis in range(d):
        sides = {}
        for step in (-1, 1):
            other = face_neighbours_by_geometry(k, p, d, axis, step)
            sides[step] = own if other is None else cell_mass(starts, density, depth, k, other)
        lower, upper = sides[-1], sides[1]
        if (lower - own) * (own - upper) > 0:
            ratio = math.log(max(upper, 1e-300)) - math.log(max(lower, 1e-300))
            cap = math.log(TILT_MAX_RATIO)
            out.append(min(max(0.5 * ratio, -cap), cap))
        else:
            out.append(0.0)
    return out


@pytest.mark.parametrize("d", [1, 2, 3])
def test_each_sub_cell_holds_the_product_of_the_axis_profiles(d: int) -> None:
    rng = np.random.default_rng(10 + d)
    depth = 10 * d
    tilted_cells = 0
    light_cells = 0
    for _ in range(24):
        depths, prefixes = random_morton_partition(rng, 4 * d)
        starts = (prefixes.astype(np.int64) << (depth - depths)).astype(np.int64)
        density = rng.exponential(1.0, starts.size) * 10 ** rng.uniform(-2, 2, starts.size)
        density[rng.random(starts.size) < 0.2] = 0.0
        out_starts, out_density = tilted_density(starts, density, depth, d)
        assert np.all(np.diff(out_starts) > 0) and out_starts[0] == 0
        assert np.all(out_density >= 0)
        bounds = np.append(out_starts, 1 << depth)
        total = float((density * np.diff(np.append(starts, 1 << depth))).sum())
        for k, p, start in zip(depths.tolist(), prefixes.tolist(), starts.tolist(), strict=True):
            end = start + (1 << (depth - k))
            inside = np.flatnonzero((out_starts >= start) & (out_starts < end))
            mass = cell_mass(starts, density, depth, k, p)
            weighty = mass / total * 2.0 ** -(k // d) >= TILT_MIN_WEIGHT  # mass share × side
            light_cells += mass > 0 and not weighty
            lam = _rates(starts, density, depth, k, p, d) if mass > 0 and weighty else [0.0] * d
            steepest = max(abs(rate) for rate in lam)
            levels = min((depth - k) // d, TILT_BITS // d,
                         1 + sum(steepest >= rate for rate in TILT_LEVEL_RATES))
            if not any(lam) or levels == 0:
                assert inside.size == 1, (k, p)
                continue
            tilted_cells += 1
            assert inside.size == 1 << (d * levels)
            lo, hi = leaf_bounds(np.array([p], np.uint64), d=d, depth=k)
            sub_depth = k + d * levels
            sub_cells = (out_starts[inside] >> (depth - sub_depth)).astype(np.uint64)
            sub_lo, sub_hi = leaf_bounds(sub_cells, d=d, depth=sub_depth)
            side = hi[0] - lo[0]
            u0, u1 = (sub_lo - lo[0]) / side, (sub_hi - lo[0]) / side  # within the cell
            expected = np.array([math.prod(_slab(lam[a], a0[a], a1[a]) for a in range(d))
                                 for a0, a1 in zip(u0, u1, strict=True)])
            got = out_density[inside] * np.diff(bounds)[inside] / mass
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert tilted_cells > 20 and light_cells > 0


def test_a_cell_between_a_sparser_and_a_denser_one_leans_toward_the_denser() -> None:
    # d = 1, four cells of a quarter with densities 1, 4, 16, 64: the second and third have
    # λ = ½ ln 16 = ln 4 (between the level rates 1 and 3: 2 levels, 4 slabs), so their mass lies
    # in the slabs as e^(λu) does, mean 0.605 of the cell (0.612 for the continuous profile);
    # the first and last touch the cube's edge and stay even.
    depth, lam = 12, math.log(4.0)
    assert TILT_LEVEL_RATES[0] <= lam < TILT_LEVEL_RATES[1]
    starts = np.arange(4, dtype=np.int64) << (depth - 2)
    out_starts, out_density = tilted_density(starts, np.array([1.0, 4.0, 16.0, 64.0]), depth, 1)
    assert out_starts.size == 2 + 2 * 4
    widths = np.diff(np.append(out_starts, 1 << depth))
    slabs = [_slab(lam, k / 4, (k + 1) / 4) for k in range(4)]
    mean = sum(share * (k + 0.5) / 4 for k, share in enumerate(slabs))
    assert mean == pytest.approx(0.6048, abs=1e-4)
    for cell in (1, 2):
        inside = (out_starts >= starts[cell]) & (out_starts < starts[cell] + (1 << (depth - 2)))
        mass = out_density[inside] * widths[inside]
        centres = (out_starts[inside] + widths[inside] / 2 - starts[cell]) / (1 << (depth - 2))
        assert (centres * mass).sum() / mass.sum() == pytest.approx(mean, rel=1e-12)
        assert mass.sum() == pytest.approx(4.0 ** cell * (1 << (depth - 2)), rel=1e-12)


@pytest.mark.parametrize("density", [[3.0] * 8, [1.0, 5.0] * 4, [0.0, 2.0, 0.0, 7.0] * 2])
def test_flat_runs_peaks_and_valleys_stay_even(density: list[float]) -> None:
    starts = np.arange(8, dtype=np.int64) << 9
    out_starts, out_density = tilted_density(starts, np.array(density), 12, 1)
    assert np.array_equal(out_starts, starts) and np.array_equal(out_density, density)


def test_next_to_an_empty_cell_the_ratio_is_capped() -> None:
    # [empty, 1, 100, 200] at d = 1: the second cell's λ is the cap, ln TILT_MAX_RATIO ≥ 3, so it
    # has 3 levels (8 slabs) and its last slab's density is e^(λ·7/8) times its first's
    starts = np.array([0, 1 << 10, 2 << 10, 3 << 10], np.int64)
    out_starts, out_density = tilted_density(starts, np.array([0.0, 1.0, 100.0, 200.0]), 12, 1)
    inside = (out_starts >= 1 << 10) & (out_starts < 2 << 10)
    lam = math.log(TILT_MAX_RATIO)
    assert lam >= TILT_LEVEL_RATES[-1] and inside.sum() == 8
    first, last = out_density[inside][0], out_density[inside][-1]
    assert last / first == pytest.approx(math.exp(lam * 7 / 8), rel=1e-9)


def test_intervals_that_are_not_dyadic_cells_stay_as_they_are() -> None:
    # a run of three cells merged into one interval [0, 96) (not a dyadic cell), then [96, 128)
    # between it (density 1) and [128, 256) (density 8): only [96, 128) is cut, λ = ½ ln 8 =
    # 1.04 (2 levels, 4 slabs)
    starts = np.array([0, 96, 128], np.int64)
    out_starts, out_density = tilted_density(starts, np.array([1.0, 2.0, 8.0]), 8, 1)
    assert out_starts[0] == 0 and out_starts[1] == 96 and out_density[0] == 1.0
    assert out_starts[-1] == 128 and out_density[-1] == 8.0
    assert out_starts.tolist()[1:-1] == [96, 104, 112, 120]
