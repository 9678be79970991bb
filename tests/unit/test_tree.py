"""The Morton routing of points (dpsynth.tree.route) against its definition."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.tree import route, splits_per_coordinate


def _reference(points: np.ndarray, depth: int) -> np.ndarray:
    """Bit k (most significant first) is digit ⌊k/d⌋ of coordinate k mod d at its own
    resolution; 1.0 lands in the top cell (module docstring), one numpy pass per level."""
    n, d = points.shape
    splits = splits_per_coordinate(depth, d)
    grid = np.empty((n, d), dtype=np.uint64)
    for i in range(d):
        cells = 1 << int(splits[i])
        grid[:, i] = np.minimum(np.floor(points[:, i] * cells), cells - 1).astype(np.uint64)
    address = np.zeros(n, dtype=np.uint64)
    for k in range(depth):
        i, digit = k % d, k // d
        bit = (grid[:, i] >> np.uint64(int(splits[i]) - 1 - digit)) & np.uint64(1)
        address = (address << np.uint64(1)) | bit
    return address


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_route_equals_the_definition_at_every_depth(d: int) -> None:
    rng = np.random.default_rng(d)
    points = rng.random((400, d))
    points[:5], points[5:10] = 1.0, 0.0  # the closed upper edge and the origin
    points[10:30] = rng.integers(0, 1 << 10, (20, d)) / (1 << 10)  # exactly on cell edges
    points[30:35] = np.nextafter(1.0, 0.0)
    for depth in range(64):
        assert (route(points, depth=depth) == _reference(points, depth)).all(), (d, depth)


def test_route_refuses_an_impossible_depth() -> None:
    with pytest.raises(ValueError, match="depth"):
        route(np.zeros((1, 2)), depth=64)
