"""Range-count queries and their relative error, as PrivTree and PHDStream report accuracy.

Layer: eval. A workload is a set of axis-aligned boxes in [0,1]^d (``random_boxes``); the
answer to a box is the number of points inside it (``range_counts``), and a synthetic set is
scored by the relative error of its rescaled answers against the true ones
(``relative_range_error``), with PrivTree's smoothing: the denominator is never below 0.1 % of
the true data size, so that near-empty boxes do not dominate.

This module is not privacy code: ``numpy.random`` only draws query boxes, from an explicit
``seed``.
"""

from __future__ import annotations

import numpy as np

from dpsynth._types import Counts, Points
from dpsynth.eval.w1 import _as_points, _rng

#: Per-side length ranges (fractions of the unit side) of each workload kind.
BOX_SIDES: dict[str, tuple[float, float]] = {
    "small": (0.01, 0.1),
    "medium": (0.1, 0.4),
    "large": (0.4, 1.0),
}

#: Elements of the largest boolean temporary ``range_counts`` builds at once (4 MB).
_BLOCK_ELEMENTS = 1 << 22

#: Boxes compared at once with a slab of points (sorted by lower first coordinate).
_BOXES_PER_BLOCK = 64


def random_boxes(d: int, count: int, *, kind: str = "medium", seed: int = 0) -> np.ndarray:
    """``count`` random axis-aligned boxes in [0,1]^d, as an array of shape (count, 2, d).

    ``boxes[q, 0]`` is the lower corner of box q and ``boxes[q, 1]`` its upper corner. Each
    side length is drawn independently and uniformly from the range of ``kind`` (fractions of
    the unit side, :data:`BOX_SIDES`): ``"small"`` [0.01, 0.1], ``"medium"`` [0.1, 0.4],
    ``"large"`` [0.4, 1.0]; then the lower corner is uniform on [0, 1 − side] in each
    coordinate, so every box lies inside the unit cube. A small box in d = 2 thus covers
    10⁻⁴ to 10⁻² of the cube's volume.

    Parameters
    ----------
    d
        Dimension.
    count
        Number of boxes.
    kind
        ``"small"``, ``"medium"`` or ``"large"``.
    seed
        Seed of the workload.

    Examples
    --------
    >>> boxes = random_boxes(2, 5, kind="small", seed=1)
    >>> boxes.shape
    (5, 2, 2)
    >>> bool(np.all((boxes[:, 0] >= 0) & (boxes[:, 1] <= 1) & (boxes[:, 0] < boxes[:, 1])))
    True
    """
    if kind not in BOX_SIDES:
        raise ValueError(f"`kind` ({kind!r}) must be one of {tuple(BOX_SIDES)}")
    if d < 1 or count < 0:
        raise ValueError(f"`d` ({d}) must be ≥ 1 and `count` ({count}) ≥ 0")
    low, high = BOX_SIDES[kind]
    rng = _rng(seed)
    sides = rng.uniform(low, high, size=(count, d))
    lower = rng.uniform(0.0, 1.0, size=(count, d)) * (1.0 - sides)
    return np.stack([lower, np.minimum(lower + sides, 1.0)], axis=1)


def _as_boxes(boxes: np.ndarray, d: int) -> np.ndarray:
    """``boxes`` checked to have shape (count, 2, d)."""
    arr = np.asarray(boxes, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[1:] != (2, d):
        raise ValueError(f"`boxes` (shape {arr.shape}) must have shape (count, 2, {d})")
    return arr


def range_counts(points: Points, boxes: np.ndarray) -> Counts:
    """Number of ``points`` in each closed box lower ≤ p ≤ upper (coordinate-wise).

    Vectorised by broadcasting points × boxes × coordinates in blocks of at most 2²² booleans
    (4 MB), so memory stays bounded for any sizes. To skip most of the work for small boxes,
    points are sorted by their first coordinate and boxes by their lower first coordinate;
    each block of :data:`_BOXES_PER_BLOCK` boxes is compared only with the slab of points whose
    first coordinate lies in the block's span. Time is O(count·d·slab) ≤ O(n·count·d).

    Parameters
    ----------
    points
        n × d points (n may be 0).
    boxes
        (count, 2, d) array from :func:`random_boxes` or built by hand.

    Returns
    -------
    Counts
        int64 array of length count, in the order of ``boxes``.

    Examples
    --------
    >>> pts = np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 0.2]])
    >>> range_counts(pts, np.array([[[0.0, 0.0], [0.5, 0.5]], [[0.0, 0.0], [1.0, 0.3]]])).tolist()
    [2, 2]
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise ValueError(f"`points` (shape {pts.shape}) must be an (n, d) array")
    n, d = pts.shape
    bx = _as_boxes(boxes, d)
    counts = np.zeros(bx.shape[0], dtype=np.int64)
    if n == 0 or bx.shape[0] == 0:
        return counts
    pts = pts[np.argsort(pts[:, 0], kind="stable")]
    box_order = np.argsort(bx[:, 0, 0], kind="stable")
    p_block = max(1, _BLOCK_ELEMENTS // (_BOXES_PER_BLOCK * d))
    for bs in range(0, bx.shape[0], _BOXES_PER_BLOCK):
        idx = box_order[bs : bs + _BOXES_PER_BLOCK]
        lo, hi = bx[None, idx, 0], bx[None, idx, 1]
        start = int(np.searchsorted(pts[:, 0], lo[0, :, 0].min(), side="left"))
        stop = int(np.searchsorted(pts[:, 0], hi[0, :, 0].max(), side="right"))
        for ps in range(start, stop, p_block):
            chunk = pts[ps : min(ps + p_block, stop), None, :]
            counts[idx] += np.all((chunk >= lo) & (chunk <= hi), axis=2).sum(axis=0)
    return counts


def relative_range_error(
    true_points: Points,
    synth_points: Points,
    boxes: np.ndarray,
    *,
    min_fraction: float = 0.001,
) -> np.ndarray:
    """Relative error of each box query on the synthetic data: |q̂ − q| / max(q, 0.001·n).

    q = number of true points in the box, n = number of true points, q̂ = number of synthetic
    points in the box rescaled by n/m (m = number of synthetic points), so that a synthetic
    set of another size is scored by its *fractions*; an empty synthetic set answers q̂ = 0.
    The denominator floor ``min_fraction``·n is PrivTree's smoothing (δ = 0.1 % of the data).
    Report the mean or median over a workload per ``kind``.

    Parameters
    ----------
    true_points
        The real data, n × d (n ≥ 1).
    synth_points
        The synthetic release, m × d.
    boxes
        (count, 2, d) query boxes.
    min_fraction
        Smoothing of the denominator, as a fraction of n.

    Returns
    -------
    numpy.ndarray
        float64 array of length count.

    Examples
    --------
    >>> pts = np.array([[0.1, 0.1], [0.9, 0.9]])
    >>> box = np.array([[[0.0, 0.0], [0.5, 0.5]]])
    >>> relative_range_error(pts, np.array([[0.2, 0.2], [0.3, 0.3]]), box).tolist()   # q̂ = 2
    [1.0]
    """
    true_arr = _as_points(true_points, "true_points")
    synth_arr = np.asarray(synth_points, dtype=np.float64).reshape(-1, true_arr.shape[1])
    if min_fraction <= 0:
        raise ValueError(f"`min_fraction` ({min_fraction}) must be positive")
    n, m = true_arr.shape[0], synth_arr.shape[0]
    q = range_counts(true_arr, boxes).astype(np.float64)
    q_hat = range_counts(synth_arr, boxes) * (n / m) if m else np.zeros_like(q)
    return np.abs(q_hat - q) / np.maximum(q, min_fraction * n)
