"""Accuracy of synthetic releases: Wasserstein-1 estimators, sampling floors, range queries.

Layer: eval. Not privacy code and never imported by the DP core; ``numpy.random`` picks only
subsamples, projections and query boxes, always from an explicit ``seed``. POT and SciPy are
imported lazily, when an exact W1 is first asked for.

==========================  ===================================================================
name                        what it computes
==========================  ===================================================================
``w1_exact``                exact W1 of empirical measures (POT ``emd2``; d = 1 sorted formula)
``w1_tree_upper``           tree/ultrametric upper bound from Morton cell counts, O(n·depth)
``w1_sliced_lower``         lower bound from 1-Lipschitz projections (ℓ1-unit for ℓ∞)
``iid_floor``               W1 between two disjoint random halves of a data set
``iid_floor_generated``     W1 between two independent samples of a known law
``random_boxes``            small / medium / large axis-aligned query workloads in [0,1]^d
``range_counts``            points per box, vectorised in bounded-memory blocks
``relative_range_error``    |q̂ − q| / max(q, 0.001·n), synthetic answers rescaled by n/m
==========================  ===================================================================
"""

from __future__ import annotations

from dpsynth.eval.queries import BOX_SIDES, random_boxes, range_counts, relative_range_error
from dpsynth.eval.sliced import w1_sliced_lower
from dpsynth.eval.w1 import (
    W1Estimate,
    default_tree_depth,
    iid_floor,
    iid_floor_generated,
    level_diameters,
    w1_exact,
    w1_tree_upper,
)

__all__ = [
    "BOX_SIDES",
    "W1Estimate",
    "default_tree_depth",
    "iid_floor",
    "iid_floor_generated",
    "level_diameters",
    "random_boxes",
    "range_counts",
    "relative_range_error",
    "w1_exact",
    "w1_sliced_lower",
    "w1_tree_upper",
]
