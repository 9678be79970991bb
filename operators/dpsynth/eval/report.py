"""The evaluation report of ``dpsynth run`` and ``dpsynth eval``: W1 bracket, floor, range errors.

Layer: adapter (evaluation reads the raw input: its results are not private).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.eval.queries import random_boxes, relative_range_error
from dpsynth.eval.sliced import w1_sliced_lower
from dpsynth.eval.w1 import default_tree_depth, iid_floor, w1_exact, w1_tree_upper


def tree_depth(n: int, m: int, d: int) -> int:
    """Depth of the tree bound in ``run`` and ``eval``: at least 20 (as the accuracy study)."""
    return min(max(20, default_tree_depth(n, m, d)), 60)


def w1_bracket(
    x: np.ndarray, y: np.ndarray, *, max_points: int = 5000, seed: int = 0,
    n_projections: int = 100,
) -> dict[str, Any]:
    """ℓ∞ W1 between a true prefix ``x`` and a release ``y``: sliced ≤ exact ≤ tree.

    ``exact`` is POT's exact W1 on at most ``max_points`` points of each set (``subsampled``
    says when it is W1 between random subsamples, biased upwards); the two bounds use all
    points.
    """
    exact = w1_exact(x, y, max_points=max_points, seed=seed)
    return {
        "metric": "chebyshev (l-infinity) on [0,1]^d",
        "exact": exact.value,
        "exact_points": exact.n_used,
        "exact_subsampled": exact.subsampled,
        "tree_upper": w1_tree_upper(x, y, depth=tree_depth(len(x), len(y), x.shape[1])),
        "sliced_lower": w1_sliced_lower(x, y, n_projections=n_projections, seed=seed),
    }


def range_query_errors(
    x: np.ndarray, y: np.ndarray, *, count: int = 200, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Relative range-query error of ``y`` against ``x`` per box size: mean, median, p90."""
    out = {}
    for kind in ("small", "medium", "large"):
        boxes = random_boxes(x.shape[1], count, kind=kind, seed=seed)
        err = relative_range_error(x, y, boxes)
        out[kind] = {"mean": float(err.mean()), "median": float(np.median(err)),
                     "p90": float(np.quantile(err, 0.9)), "boxes": count}
    return out


def evaluate_release(
    x: np.ndarray, y: np.ndarray, *, max_points: int = 5000, seed: int = 0, boxes: int = 200
) -> dict[str, Any]:
    """Everything ``dpsynth eval`` reports: the W1 bracket, the i.i.d. floor, range errors.

    The floor is exact W1 between two disjoint random halves of ``x`` (each at most
    ``max_points``): the sampling error of a set of that size, which no synthesizer beats.
    """
    out = w1_bracket(x, y, max_points=max_points, seed=seed)
    if len(x) >= 2:
        half = min(len(x) // 2, max_points)
        out["iid_floor"] = iid_floor(x, n=half, seed=seed, max_points=max_points)
        out["iid_floor_points"] = half
    out["range_queries"] = range_query_errors(x, y, count=boxes, seed=seed)
    return out


