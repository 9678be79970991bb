"""dpsynth.online.guided.node_reuse: a summary's counts combined with its children's (a level
≥ 1 node with its 8 children, a closing block with its top time nodes)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.online.guided.node_reuse import combined_counts, common_coarsening, unfloored_counts
from dpsynth.online.summary import Summary

DEPTH = 8  # the partitions' maximal depth in these tests


def _random_partition(rng: np.random.Generator, split: float) -> tuple[np.ndarray, np.ndarray]:
    """Leaves (depths, prefixes, Morton order) of a random dyadic partition of depth ≤ DEPTH."""
    leaves, stack = [], [(0, 0)]
    while stack:
        depth, prefix = stack.pop()
        if depth < DEPTH and rng.random() < split:
            stack += [(depth + 1, 2 * prefix + 1), (depth + 1, 2 * prefix)]
        else:
            leaves.append((depth, prefix))
    depths, prefixes = np.array(leaves, np.int64).T
    return depths, prefixes.astype(np.uint64)


def _intervals(depths: np.ndarray, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    shift = (DEPTH - depths).astype(np.uint64)
    starts = prefixes << shift
    return starts, starts + (np.uint64(1) << shift)


@pytest.mark.parametrize("seed", range(20))
def test_the_common_coarsening_is_a_partition_of_whole_leaves(seed: int) -> None:
    rng = np.random.default_rng(seed)
    partitions = [_intervals(*_random_partition(rng, rng.uniform(0.5, 0.8))) for _ in range(3)]
    cells = common_coarsening([s for s, _ in partitions])
    ends = np.concatenate([cells[1:], [np.uint64(1 << DEPTH)]])
    assert cells[0] == 0 and (cells[1:] > cells[:-1]).all()  # a partition of the cube
    every_start = np.concatenate([s for s, _ in partitions])
    every_end = np.concatenate([e for _, e in partitions])
    for low, high in zip(cells, ends, strict=True):  # each cell is a leaf of some partition ...
        assert ((every_start == low) & (every_end == high)).any()
    for starts, stops in partitions:  # ... and every leaf lies inside one cell
        inside = np.searchsorted(cells, starts, side="right") - 1
        assert (stops <= ends[inside]).all()


def _summary(depths: np.ndarray, prefixes: np.ndarray, counts: np.ndarray,
             epsilon: float) -> Summary:
    return Summary(depths, prefixes, counts, float(counts.sum()), scale=1.0 / epsilon)


def test_combined_counts_are_unbiased_and_less_noisy_where_the_nodes_are_nested() -> None:
    """A block of 4 leaves at ε = 0.3, two nodes at ε = 0.3 that split its records: in the
    left half each node is as fine as the block (a leaf's count is measured by the block,
    variance v, and by the sum of the nodes, 2v: 2v/3 combined), in the right half each node has
    one leaf (the half's total: 2v by the block, 2v by the nodes, v combined; a leaf 3v/4). 2,000
    draws of exact Lap_Z noise; the bounds allow 5 standard errors of a mean and 25 % on a
    variance (≈ 5 standard errors for Laplace draws): false alarms < 10⁻⁵ per check."""
    epsilon, draws = 0.3, 2000
    block_depths = np.array([2, 2, 2, 2], np.int64)
    block_prefixes = np.arange(4, dtype=np.uint64)
    node_depths = np.array([2, 2, 1], np.int64)
    node_prefixes = np.array([0, 1, 1], np.uint64)
    truth = np.array([40, 0, 25, 5])
    node_truth = [np.array([30, 0, 10]), np.array([10, 0, 20])]  # the block's records, split
    noise = KeyedNoise(bytes(32))
    out = np.empty((draws, 4))
    for i in range(draws):
        draw = noise.discrete_laplace_at(1 / epsilon, ("reuse", i), np.arange(10), 0)
        nodes = [_summary(node_depths, node_prefixes, part + draw[4 + 3 * j: 7 + 3 * j],
                          epsilon) for j, part in enumerate(node_truth)]
        out[i] = combined_counts(block_depths, block_prefixes, truth + draw[:4], epsilon,
                                 nodes, DEPTH)
    v = discrete_laplace_variance(1 / epsilon)
    error = out - truth
    assert np.all(np.abs(error.mean(axis=0)) < 5 * np.sqrt(v / draws))  # unbiased
    variance = error.var(axis=0)
    assert np.all(variance[:2] < 2 * v / 3 * 1.25)
    total = error[:, 2] + error[:, 3]
    assert total.var() < v * 1.25
    assert np.all(variance[2:] < 3 * v / 4 * 1.25)


def test_without_noise_the_counts_are_unchanged() -> None:
    depths, prefixes = np.array([1, 1], np.int64), np.array([0, 1], np.uint64)
    counts = np.array([3, 4])
    node = _summary(np.array([0]), np.array([0], np.uint64), np.array([7]), 1e6)
    assert combined_counts(depths, prefixes, counts, 1e6, [node], DEPTH).tolist() == [3, 4]


def test_unfloored_counts_restore_what_the_floors_dropped() -> None:
    summary = Summary(np.array([1, 1]), np.array([0, 1], np.uint64), np.array([0, 9]), 9.0,
                      dropped=np.array([0]), dropped_counts=np.array([5]))
    assert unfloored_counts(summary).tolist() == [5, 9]
    assert summary.counts.tolist() == [0, 9]  # the summary itself is unchanged
