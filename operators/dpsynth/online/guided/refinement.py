"""Paid refinement of guided partitions at large ε: PrivTree where released summaries are blind.

Layer: core. Used by :mod:`dpsynth.online.guided` (issue 14). A guided partition is a function
of summaries already released, so it cannot see records that arrive where those summaries had
little mass: they land in coarse leaves, and each time level refines a leaf by only three depths
(a cell under a quarter of a record of guide mass is not split). Block 0 has no earlier summary
at all. At large ε this caps the error far above the tree's resolution (docs/decisions/0004).
No partition chosen without the records can do better with few leaves: locating n fresh
records to depth D needs about 2^D leaves.

So a summary whose own budget ε is at least :data:`REFINE_FROM` spends :data:`REFINE_SHARE` of it,
ε_s, on the split decisions of a PrivTree over its own records (Zhang et al. 2016, Alg 1;
:mod:`dpsynth.online.privtree`, the exact path loss of P10), and counts its leaves at
ε − ε_s on the *common refinement* of the guided partition and the PrivTree's leaves (every
cell either splits). At ε_s ≥ 32 the PrivTree follows single records to about depth 20, so the
summary tends to its records at the tree's resolution as ε grows (consistency). Below
:data:`REFINE_FROM` nothing changes: no decision, the whole ε on the counts.

Privacy (docs/privacy.md P16): under add/remove one record changes the PrivTree's decisions by
at most ε_s (P10: the whole tree, any depth) and then one leaf count of the refinement by one
(ε − ε_s): ε in all, as before. Under replacement the record stays in the summary (a group of
two): 2ε, as before. The threshold reads only ε (public configuration).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth._types import CellIds
from dpsynth.noise import KeyedNoise
from dpsynth.online.privtree import privtree_leaves, privtree_params
from dpsynth.tree import first_cells

#: A summary whose own ε is at least this pays for a PrivTree refinement
#: (docs/decisions/0004). Above every summary budget at a per-record ε ≤ 16 (at most
#: 0.9·16 = 14.4: block 0 under add/remove), so those releases are unchanged; where the
#: decisions begin, the counts' noise at ε/2 ≥ 16 is already negligible (E|Lap_Z(1/16)| ≈ 2·10⁻⁷).
REFINE_FROM = 32.0
#: ε_s / ε of a refined summary: ε_s = 16 at REFINE_FROM, where PrivTree's depth bias lets a
#: single record reach depth 10 and a pair depth 20.
REFINE_SHARE = 0.5


def refine_share(epsilon: float) -> float:
    """The share of a summary's ``epsilon`` spent on PrivTree decisions: 0 below
    :data:`REFINE_FROM`, :data:`REFINE_SHARE` from it."""
    return REFINE_SHARE if epsilon >= REFINE_FROM else 0.0


def common_refinement(depths_a: np.ndarray, prefixes_a: CellIds, depths_b: np.ndarray,
                      prefixes_b: CellIds, max_depth: int) -> tuple[np.ndarray, CellIds]:
    """The leaves (depths, Morton prefixes, in Morton order) of the coarsest partition finer
    than both Morton partitions a and b: two dyadic cells are nested or disjoint, so its
    cells start at the union of both partitions' starts.

    >>> depths, prefixes = common_refinement(np.array([1, 1]), np.array([0, 1], np.uint64),
    ...                                      np.array([2, 2, 1]), np.array([0, 1, 1], np.uint64), 3)
    >>> depths.tolist(), prefixes.tolist()
    ([2, 2, 1], [0, 1, 1])
    """
    top = np.uint64(max_depth)
    starts = np.union1d(first_cells(depths_a, prefixes_a, depth=max_depth),
                        first_cells(depths_b, prefixes_b, depth=max_depth))
    widths = np.diff(np.append(starts, np.uint64(1) << top))
    depths = max_depth - np.log2(widths.astype(np.float64)).astype(np.int64)  # powers of two
    return depths, starts >> (top - depths.astype(np.uint64))


def refined_partition(records: CellIds, depths: np.ndarray, prefixes: CellIds,
                      epsilon: float, noise: KeyedNoise, context: Sequence[int | str], *,
                      max_depth: int) -> tuple[np.ndarray, CellIds, float]:
    """(depths, prefixes, ε left for the counts) of a summary at ``epsilon`` whose guided
    partition is (``depths``, ``prefixes``): unchanged below :data:`REFINE_FROM`, else refined
    by a PrivTree at ε_s = :func:`refine_share` · ε over the summary's ``records`` (addresses
    at ``max_depth``, any order; decision noise at (context + ("split",), prefix, depth);
    privacy: P16)."""
    structure = refine_share(epsilon) * epsilon
    if structure == 0.0:
        return depths, prefixes, epsilon
    cells, weights = np.unique(np.asarray(records, np.uint64), return_counts=True)
    params = privtree_params(structure, max_depth=max_depth)
    tree_depths, tree_prefixes = privtree_leaves(cells, weights, params, noise, context,
                                                 address_depth=max_depth)  # privacy: P10
    depths, prefixes = common_refinement(depths, prefixes, tree_depths, tree_prefixes,
                                         max_depth)
    return depths, prefixes, epsilon - structure
