"""EM steps for a common density behind several histograms (dpsynth.online.guided.em)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.online.guided.em import em_density, stacked_parts
from dpsynth.online.rounding import density_at, sorted_union
from tests.support.densities import random_density


def test_em_step_keeps_each_parts_mass_in_each_of_its_intervals() -> None:
    """One EM step only moves mass *inside* the intervals of each part: a part's interval mass
    is preserved, so a fresh coarse summary still decides where its records are."""
    rng = np.random.default_rng(2)
    depth = 8
    parts = [random_density(rng, depth) for _ in range(4)]
    for _, density in parts:
        density[0] += 1.0  # every part holds mass
    grid, density = em_density(parts, depth)
    widths = np.diff(np.concatenate([grid, [1 << depth]]))
    total = sum(float((d * np.diff(np.concatenate([s, [1 << depth]]))).sum()) for s, d in parts)
    assert (density * widths).sum() == pytest.approx(total)
    one = [parts[0]]
    g1, d1 = em_density(one, depth)  # a single part is its own fixed point
    np.testing.assert_allclose(density_at(g1, d1, parts[0][0]), parts[0][1])


def _em_reference(parts, depth, steps):  # type: ignore[no-untyped-def]
    """EM steps by their definition, in numpy (the code before the compiled pass): each step
    spreads every part's interval mass like the current estimate, the parts' sum at first."""
    grid = sorted_union(*(starts for starts, _ in parts))
    widths = np.diff(np.concatenate([grid, [1 << depth]]))
    estimate = sum(density_at(starts, density, grid) for starts, density in parts)
    for _ in range(steps):
        cum = np.concatenate([[0.0], np.cumsum(estimate * widths)])
        out = np.zeros(grid.size)
        for starts, density in parts:
            first = np.searchsorted(grid, starts)
            last = np.concatenate([first[1:], [grid.size]])
            mass = density * np.diff(np.concatenate([starts, [1 << depth]]))
            inside = cum[last] - cum[first]
            leaf = np.searchsorted(starts, grid, side="right") - 1
            ratio = np.divide(mass, inside, out=np.zeros(mass.size), where=inside > 0)
            out += np.where(inside[leaf] > 0, estimate * ratio[leaf], density[leaf])
        estimate = out
    return grid, estimate


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_em_steps_match_their_definition(steps: int) -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        depth = int(rng.integers(1, 12))
        parts = [random_density(rng, depth) for _ in range(int(rng.integers(1, 9)))]
        grid, density = em_density(parts, depth, steps=steps)
        want_grid, want = _em_reference(parts, depth, steps)
        assert (grid == want_grid).all()
        np.testing.assert_allclose(density, want, rtol=1e-10, atol=1e-300)


def test_a_second_step_moves_a_coarse_parts_mass_further_toward_fine_structure() -> None:
    """A coarse part (one leaf, mass C over W cells) and a fine one (mass F in cell 0). Step 1
    puts the share (C/W + F)/(C + F) of the coarse mass in cell 0; step 2 spreads it like step
    1's estimate, whose cell 0 holds F + C·that share: a larger share."""
    depth, coarse, fine = 4, 80.0, 20.0
    width = 1 << depth
    parts = [(np.array([0]), np.array([coarse / width])),
             (np.array([0, 1]), np.array([fine, 0.0]))]
    share1 = (coarse / width + fine) / (coarse + fine)
    cell0_1 = fine + coarse * share1
    share2 = cell0_1 / (coarse + fine)
    for steps, share in ((1, share1), (2, share2)):
        grid, density = em_density(parts, depth, steps=steps)
        assert density_at(grid, density, np.array([0]))[0] == pytest.approx(
            fine + coarse * share)
    assert share2 > share1


def test_stacked_earlier_parts_give_the_same_bytes_as_listing_them() -> None:
    """The closed blocks are stacked and summed once and the cover scaled inside; the EM step
    must then be bit-for-bit the step over all parts listed in order, the cover's densities
    multiplied first (releases are pinned by golden hashes)."""
    rng = np.random.default_rng(9)
    for _ in range(300):
        depth = int(rng.integers(1, 14))
        parts = [random_density(rng, depth) for _ in range(int(rng.integers(2, 10)))]
        cut = int(rng.integers(0, len(parts) + 1))  # 0: none stacked; len: all stacked
        scale = float(rng.choice([1.0, rng.uniform(0.1, 10.0)]))
        listed = parts[:cut] + [(st, dn * scale) for st, dn in parts[cut:]]
        grid, density = em_density(listed, depth)
        before = stacked_parts(parts[:cut]) if cut else None
        grid2, density2 = em_density(parts[cut:], depth, before, scale)
        assert grid.tobytes() == grid2.tobytes()
        assert density.tobytes() == density2.tobytes()
