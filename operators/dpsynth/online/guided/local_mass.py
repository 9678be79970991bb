"""A summary's dropped leaves give their noisy mass to the kept leaves nearest to them.

Layer: core, post-processing only (privacy: P6). A guided summary keeps a leaf whose noisy count
exceeds its floor (:mod:`~dpsynth.online.guided.floors`) and drops the rest; scaled to the summary's
size, the kept leaves used to share the dropped leaves' mass in proportion to their counts, over
the whole cube. Both tails of that are biased (docs/decisions/0013):

* an empty leaf's noise is kept only when it is large, so kept leaves in empty space carry
  phantom mass of positive mean, and a dropped empty leaf's noise has a negative mean;
* a thin real region (a far cluster of a few records per summary) is dropped, and its records
  move to the dense mode.

Here each dropped leaf's *signed* noisy count goes to the kept leaves of its nearest ancestor
cell that holds one, in proportion to their counts, the ancestor's total clipped at zero:
bottom-up, one tree level at a time, what finds no kept leaf moving up (at the root it is the
old global share). The noise of the dropped leaves of a region partly cancels the phantom kept
there, and a thin region's dropped records stay near it: the release mean is no longer pulled
toward dense modes or empty space in one direction (the bias tests of issue 31), at the cost of
the dropped leaves' noise landing on the kept leaves next to them.

``guided`` reads summaries this way at a release, for d ≥ 2 (the partitions are guided by the
summaries as they were released). Privacy: a function of one released summary — its partition,
its noisy counts (those the floors zeroed included) and its floor: post-processing
(docs/privacy.md P6, P16); no record is read and no noise is drawn.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dpsynth._types import CellIds, Counts, Points
from dpsynth.online.guided.node_reuse import unfloored_counts
from dpsynth.online.summary import Summary


def locally_placed(summary: Summary) -> Summary:
    """``summary`` with every dropped leaf's noisy count added to the kept leaves of its nearest
    ancestor holding one (module docstring); kept leaves are those above the summary's floor.
    The result's floor is 0 (its dropped leaves hold 0), its size, scale and leaves the same.
    A summary without a floor, with every leaf kept or none, is returned as it is.

    >>> s = Summary(np.array([2, 2, 2, 2]), np.array([0, 1, 2, 3], np.uint64),
    ...             np.array([10, -2, 1, 5]), 14.0, floor=2.0)
    >>> locally_placed(s).counts.tolist()  # each dropped leaf to its kept sibling
    [8.0, 0.0, 0.0, 6.0]
    >>> s.counts = np.array([10, -2, 1, 0]); s.floor = 4.0  # leaf 2 and 3 dropped: up a level
    >>> locally_placed(s).counts.tolist()
    [9.0, 0.0, 0.0, 0.0]
    """
    if summary.floor is None:
        return summary
    kept = np.asarray(summary.counts) > summary.floor
    if kept.all() or not kept.any():
        return summary
    counts = _placed(np.asarray(summary.depths, np.int64),
                     np.asarray(summary.prefixes, np.uint64),
                     unfloored_counts(summary).astype(np.float64), kept)
    return Summary(summary.depths, summary.prefixes, counts, summary.size, floor=0.0,
                   scale=summary.scale)


@njit(cache=True)
def _placed(depths: Counts, prefixes: CellIds, raw: Points, kept: np.ndarray) -> Points:
    """The kept leaves' counts after the bottom-up pass (leaves in Morton order, so the leaves
    inside one ancestor are a run); the dropped leaves' entries are 0."""
    n = depths.size
    out = np.zeros(n, np.float64)
    unplaced = np.zeros(n, np.float64)
    left = 0  # dropped leaves whose nonzero count is not placed yet
    for j in range(n):
        if kept[j]:
            out[j] = raw[j]
        elif raw[j] != 0.0:
            unplaced[j] = raw[j]
            left += 1
    level = int(depths.max())
    while level >= 0 and left > 0:
        j = 0
        while j < n:
            if depths[j] < level:  # larger than this level's cells: in no group here
                j += 1
                continue
            ancestor = prefixes[j] >> np.uint64(depths[j] - level)
            end, total, extra, has_kept = j, 0.0, 0.0, False
            while (end < n and depths[end] >= level
                   and prefixes[end] >> np.uint64(depths[end] - level) == ancestor):
                if kept[end]:
                    total += out[end]
                    has_kept = True
                else:
                    extra += unplaced[end]
                end += 1
            if has_kept and total > 0.0:
                factor = max(total + extra, 0.0) / total
                for i in range(j, end):
                    if kept[i]:
                        out[i] *= factor
                    elif unplaced[i] != 0.0:
                        unplaced[i] = 0.0
                        left -= 1
            j = end
        level -= 1
    return out

