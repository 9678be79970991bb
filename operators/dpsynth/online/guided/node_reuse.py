"""A summary's counts combined with its children's: Honaker's reuse of the time tree.

Layer: core, post-processing only (privacy: P6). ``guided`` measures each record of block b
several times with independent noise: by the block's own summary (ε_top) and once per time
level by a node (ε_l). A node of level l ≥ 1 holds exactly the records of its 8 children (level
l − 1), and a closing block exactly those of its top time nodes. The release used to read the
block's summary alone once it closed, and each node alone. Honaker (2015) combines a tree's
measurements of the same counts by generalised least squares; here the measurements sit on
different partitions, so they are combined on their common coarsening: the cells that are a
leaf of one partition and lie inside no larger leaf of another (dyadic leaves are nested or
disjoint, so these cells partition the cube and each is a union of whole leaves of every
partition). In such a cell holding k leaves of the summary, of noise variance v each, with
their sum S and the children's sum N of variance V, the best linear unbiased estimate of each
leaf is its count plus (N − S)·v / (k·v + V): one share of the difference, weighted by the
variances. Where the children are coarse the summary's total in the cell is corrected; a leaf
that is also a leaf of each of n children at the same ε goes from variance v to n·v/(n + 1).

Counts are the summaries' noisy counts before the floors of :mod:`~dpsynth.online.guided.floors`
(:func:`unfloored_counts`); the summary's floors apply to the combined counts.

Privacy: a function of released noisy counts, partitions and public ε: post-processing
(docs/privacy.md P6, P16); no record is read.
"""

from __future__ import annotations

import numpy as np

from dpsynth.noise import discrete_laplace_variance
from dpsynth.online.rounding import interval_of
from dpsynth.online.summary import Summary
from dpsynth.tree import first_cells


def unfloored_counts(summary: Summary) -> np.ndarray:
    """A summary's noisy counts before :mod:`~dpsynth.online.guided.floors` zeroed any."""
    if summary.dropped is None:
        return np.asarray(summary.counts)
    counts = np.array(summary.counts, copy=True)
    counts[summary.dropped] = summary.dropped_counts
    return counts


def common_coarsening(starts: list[np.ndarray]) -> np.ndarray:
    """The sorted starts of the cells of the common coarsening of dyadic partitions, given
    each partition's sorted leaf starts: the starts that every partition has (no leaf of any
    partition straddles such a point, and dyadic leaves are nested or disjoint).

    >>> common_coarsening([np.array([0, 2, 3], np.uint64), np.array([0, 1, 2], np.uint64)])
    array([0, 2], dtype=uint64)
    """
    shared = starts[0]
    for other in starts[1:]:
        at = np.maximum(interval_of(other, shared), 0)  # the last start of other at or below
        shared = shared[other[at] == shared]
    return shared


def combined_counts(depths: np.ndarray, prefixes: np.ndarray, counts: np.ndarray,
                    epsilon: float, nodes: list[Summary], max_depth: int) -> np.ndarray:
    """A summary's noisy leaf counts (``counts``, noise Lap_Z(1/ε)) combined with those of the
    ``nodes`` (its children) that hold exactly its records (module docstring). Not rounded: a
    cell's correction is shared by its leaves in equal fractions, and rounding each alone moved
    a cell's total by up to half a record per leaf (docs/decisions/0009)."""
    leaf_var = discrete_laplace_variance(1.0 / epsilon)
    if not nodes or leaf_var <= 0:  # no noise (ε → ∞): the counts are exact
        return counts
    block_starts = first_cells(depths, prefixes, depth=max_depth)
    node_starts = [first_cells(n.depths, n.prefixes, depth=max_depth) for n in nodes]
    cells = common_coarsening([block_starts, *node_starts])
    cell = interval_of(cells, block_starts)
    block_sum = np.bincount(cell, np.asarray(counts, np.float64), cells.size)
    leaves = np.bincount(cell, minlength=cells.size).astype(np.float64)
    where = np.concatenate([interval_of(cells, starts) for starts in node_starts])
    node_counts = np.concatenate([unfloored_counts(n) for n in nodes]).astype(np.float64)
    node_leaf_var = np.repeat([discrete_laplace_variance(_scale(n)) for n in nodes],
                              [n.leaves for n in nodes])
    node_sum = np.bincount(where, node_counts, cells.size)
    node_var = np.bincount(where, node_leaf_var, cells.size)
    share = leaf_var / (leaves * leaf_var + node_var)  # every cell starts a block leaf
    combined: np.ndarray = counts + ((node_sum - block_sum) * share)[cell]
    return combined


def _scale(summary: Summary) -> float:
    assert summary.scale is not None  # guided's summaries record their noise scale
    return summary.scale
