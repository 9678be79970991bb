"""Guided partitions (dpsynth.online.guided.partition): the halo of cells next to much denser ones.

The mass × diameter rule and the whole squares are tested with the mechanism in test_guided.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.online.guided import partition
from dpsynth.online.guided.partition import (
    HALO_MIN_MASS,
    HALO_RATIO,
    MIN_SPLIT_MASS,
    face_neighbour,
    guided_partition,
)
from tests.support.densities import cell_mass, face_neighbours_by_geometry


def _neighbours(k: int, p: int, d: int) -> list[int]:
    """The face neighbours of cell (k, p), found geometrically (tests/support/densities)."""
    found = (face_neighbours_by_geometry(k, p, d, axis, step)
             for axis in range(d) for step in (-1, 1))
    return [other for other in found if other is not None]


@pytest.mark.parametrize("d", [1, 2, 3])
def test_face_neighbours_are_the_cells_one_side_away(d: int) -> None:
    rng = np.random.default_rng(d)
    for _ in range(300):
        k = int(rng.integers(0, 40))
        p = int(rng.integers(0, 1 << k)) if k else 0
        found = []
        for axis in range(d):
            for step in (-1, 1):
                other, exists = face_neighbour(np.uint64(p), k, d, axis, step)
                if exists:
                    found.append(int(other))
        assert sorted(found) == sorted(_neighbours(k, p, d)), (d, k, p)


def _halo_splits(starts: np.ndarray, density: np.ndarray, depth: int, threshold: float, d: int,
                 max_depth: int) -> int:
    """Check that the guided partition splits exactly where the mass rule or the halo holds;
    the number of leaves below a cell that only the halo split."""

    def mass_rule(k: int, p: int) -> bool:
        m = cell_mass(starts, density, depth, k, p)
        return m >= MIN_SPLIT_MASS and m * 2.0 ** -(k // d) > threshold

    def halo(k: int, p: int, slack: float = 0.0) -> bool:
        """The halo rule; ``slack`` widens the ratio test by a relative margin (the test's
        masses are summed in another order: ties may round either way)."""
        least = HALO_RATIO * cell_mass(starts, density, depth, k, p) * (1 + slack)
        return cell_mass(starts, density, depth, k, p) >= HALO_MIN_MASS and any(
            mass_rule(k, q) and cell_mass(starts, density, depth, k, q) >= least
            for q in _neighbours(k, p, d))

    depths, prefixes = guided_partition(starts, density, depth, threshold, d, max_depth)
    halos = 0
    for k, p in zip(depths.tolist(), prefixes.tolist(), strict=True):
        assert k == max_depth or not (mass_rule(k, p) or halo(k, p, 1e-9))  # a leaf
        for up in range(1, k + 1):  # every ancestor was split by one rule
            assert mass_rule(k - up, p >> up) or halo(k - up, p >> up, -1e-9)
        halos += any(halo(k - up, p >> up) and not mass_rule(k - up, p >> up)
                     for up in range(1, k + 1))
    assert (2.0 ** -depths.astype(np.float64)).sum() == pytest.approx(1.0)  # a partition
    return halos


def test_partition_splits_exactly_where_the_mass_rule_or_the_halo_holds() -> None:
    """Every leaf fails both rules (or is at max_depth) and every split cell passes one:
    m·D > θ (with m ≥ a quarter record), or the halo — m ≥ HALO_MIN_MASS and a face neighbour
    with ≥ HALO_RATIO·m and m·D > θ. d = 1 and 3 (in d = 2 dense cells are also split into
    whole squares, test_guided.py)."""
    rng = np.random.default_rng(0)
    halos = 0
    for d in (1, 3):
        for _ in range(4):
            depth = 9
            starts = np.sort(rng.choice(1 << depth, 40, replace=False)).astype(np.int64)
            starts[0] = 0
            density = rng.exponential(1.0, starts.size) ** 4 * 40 * (rng.random(starts.size) < 0.7)
            halos += _halo_splits(starts, density, depth, 40.0, d, 16)
    assert halos > 0  # the halo split some cells here: the test is not vacuous


def test_the_sparse_side_of_a_dense_edge_is_split_along_the_edge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """d = 1, θ = 100: a dense guide cell [1/2, 1/2 + 1/64) of 5000 records and 600 spread over
    [1/4, 1/2). The mass rule alone cuts the sparse side in two; the halo cuts it ever finer
    toward the dense cell, down to that cell's own width (deeper, the dense cell is not split:
    5000/64 < θ), and leaves it coarse far from it."""
    depth = 6
    starts = np.arange(1 << depth)
    density = np.zeros(1 << depth)
    density[32] = 5000.0
    density[16:32] = 600.0 / 16

    def sparse_leaves() -> list[tuple[float, float]]:
        depths, prefixes = guided_partition(starts, density, depth, 100.0, 1, 12)
        cells = [(p * 2.0 ** -k, (p + 1) * 2.0 ** -k)
                 for k, p in zip(depths.tolist(), prefixes.tolist(), strict=True)]
        return [(a, b) for a, b in cells if 0.25 <= a and b <= 0.5]

    with_halo = sparse_leaves()
    monkeypatch.setattr(partition, "HALO_MIN_MASS", np.inf)
    assert sparse_leaves() == [(0.25, 0.375), (0.375, 0.5)]
    assert with_halo == [(0.25, 0.375), (0.375, 0.4375), (0.4375, 0.46875),
                         (0.46875, 0.484375), (0.484375, 0.5)]
