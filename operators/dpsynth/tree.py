"""The binary hierarchical partition of [0,1]^d: round-robin midpoint splits, Morton addresses.

Layer: core. docs/algorithms.md A.2, C.8 (the texts fix only "halves through the middle along a
coordinate"): going from depth k to k+1 we split coordinate k mod d at the midpoint of the cell's
interval; child bit 0 is the lower half [a, mid), bit 1 the upper half [mid, b] (1.0 goes up). Bit k
of a point's address is therefore the (⌊k/d⌋+1)-th binary digit of x_{k mod d}, and the cell of
depth j containing x is the integer formed by the first j bits (most significant first): the Morton
/ Z-order code. Children of cell c are 2c and 2c+1. A level-j cell has side 2^-⌈(j−i)/d⌉ in
coordinate i and ℓ∞ diameter 2^-⌊j/d⌋. The partition never depends on the data.

``max_depth`` caps the tree: it is privacy-neutral (fewer queries are asked), it bounds memory,
and accuracy then plateaus at the leaf diameter 2^-⌊max_depth/d⌋.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth._types import CellIds, Points
from dpsynth.errors import SchemaError

#: Addresses are uint64: at most 63 levels.
MAX_TREE_DEPTH = 63


def splits_per_coordinate(depth: int, d: int) -> np.ndarray:
    """Number of halvings of each coordinate after ``depth`` splits: ⌈(depth − i)/d⌉.

    >>> splits_per_coordinate(5, 2).tolist()
    [3, 2]
    """
    i = np.arange(d)
    return np.maximum((depth - i + d - 1) // d, 0)


def route(points: Points, *, depth: int) -> CellIds:
    """Morton address at ``depth`` of every point (uint64), vectorised over the batch.

    >>> route(np.array([[0.1, 0.9], [0.6, 0.2], [1.0, 1.0]]), depth=2).tolist()
    [1, 2, 3]
    """
    points = np.asarray(points, dtype=np.float64)
    n, d = points.shape
    if not 0 <= depth <= MAX_TREE_DEPTH:
        raise ValueError(f"depth ({depth}) must lie in [0, {MAX_TREE_DEPTH}]")
    address = np.empty(n, dtype=np.uint64)
    _interleave(np.ascontiguousarray(points), splits_per_coordinate(depth, d).astype(np.int64),
                depth, address)
    return address


@njit(cache=True)
def _interleave(points: Points, splits: NDArray[np.int64], depth: int, out: CellIds) -> None:
    """Morton bits, most significant first: bit k is digit ⌊k/d⌋ of coordinate k mod d, the
    coordinate's grid index at its own resolution (1.0 lands in the top cell). One compiled
    pass per point instead of a numpy pass per level."""
    d = points.shape[1]
    one = np.uint64(1)
    grid = np.empty(d, np.uint64)
    for p in range(points.shape[0]):
        for i in range(d):
            cells = 2.0 ** splits[i]  # exact; cells − 1 rounds as numpy rounds the int
            grid[i] = np.uint64(min(np.floor(points[p, i] * cells), cells - 1.0))
        address = np.uint64(0)
        for k in range(depth):
            i = k % d
            shift = np.uint64(splits[i] - 1 - k // d)
            address = (address << one) | ((grid[i] >> shift) & one)
        out[p] = address


def ancestors(address: CellIds, *, depth: int, level: int) -> CellIds:
    """Cell of depth ``level`` containing each cell of depth ``depth`` (drop the last bits)."""
    return np.asarray(address, dtype=np.uint64) >> np.uint64(depth - level)


def first_cells(depths: np.ndarray, prefixes: np.ndarray, *, depth: int) -> CellIds:
    """The first cell of depth ``depth`` inside each cell (``depths``, Morton ``prefixes``, none
    deeper than ``depth``): leaves in Morton order give sorted starts.

    >>> first_cells(np.array([1, 2]), np.array([1, 1], np.uint64), depth=3).tolist()
    [4, 2]
    """
    shift = np.uint64(depth) - np.asarray(depths, np.int64).astype(np.uint64)
    starts: CellIds = np.asarray(prefixes, np.uint64) << shift
    return starts


def leaf_bounds(cells: np.ndarray, *, d: int, depth: int) -> tuple[Points, Points]:
    """Lower and upper corners of the given cells of depth ``depth`` (each n×d).

    >>> lo, hi = leaf_bounds(np.array([1, 2]), d=2, depth=2)
    >>> lo.tolist(), hi.tolist()
    ([[0.0, 0.5], [0.5, 0.0]], [[0.5, 1.0], [1.0, 0.5]])
    """
    cells = np.asarray(cells, dtype=np.uint64)
    splits = splits_per_coordinate(depth, d)
    grid = np.zeros((cells.size, d), dtype=np.uint64)
    one = np.uint64(1)
    for k in range(depth):
        i = k % d
        bit = (cells >> np.uint64(depth - 1 - k)) & one
        grid[:, i] = (grid[:, i] << one) | bit
    side = 1.0 / (np.uint64(1) << splits.astype(np.uint64)).astype(np.float64)
    lower = grid.astype(np.float64) * side
    return lower, lower + side


def cell_diameter(depth: int, d: int) -> float:
    """ℓ∞ diameter of a depth-``depth`` cell: 2^-⌊depth/d⌋."""
    return 2.0 ** -(depth // d)


def validate_points(points: Points | np.ndarray, d: int) -> tuple[Points, int]:
    """Points as an n×d float array in [0,1]; returns (points, number clipped).

    NaN, ±inf and a wrong shape are refused (nothing is counted); values outside [0,1] are
    clipped and counted. Messages never show a value.
    """
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim == 1 and d == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] != d:
        raise SchemaError(f"points must have shape (n, {d}); got shape {arr.shape}")
    finite = np.isfinite(arr)
    if not finite.all():
        row = int(np.flatnonzero(~finite.all(axis=1))[0])
        raise SchemaError(f"points row {row} holds NaN or infinity; drop or repair it upstream")
    outside = (arr < 0.0) | (arr > 1.0)
    clipped = int(outside.any(axis=1).sum())
    if clipped:
        arr = np.clip(arr, 0.0, 1.0)
    return arr, clipped
