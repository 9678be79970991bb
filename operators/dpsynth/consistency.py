"""Consistency: noisy tree counts → non-negative integer counts that add up the tree.

Layer: core. Dissertation Alg 3 (= HVZ Alg 4) with the corrections of docs/algorithms.md C.7:
negative noisy counts are clipped to 0 first; the root count is given (t online, public under
replacement; the noisy root offline); then, top-down, each parent's count m is split between its
children into a vector *comparable* with the children's noisy counts (a): on a deficit both children
grow, on a surplus both shrink. The split is proportional — b0 = m·a0/(a0+a1), rounded down on a
deficit and up on a surplus, which keeps comparability exactly — and, when both children are 0,
equal, the odd unit going to child 0 of even parents and child 1 of odd parents (a data-independent
tie-break). Everything here is post-processing of noisy counts, so it costs no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth._types import Counts

#: Products m·a are formed in int64: counts must stay below 3·10^9.
MAX_COUNT = 3_000_000_000


def split_parents(parents: Counts, noisy_children: Counts) -> Counts:
    """Split each parent count between its two children (children of p are 2p and 2p+1).

    >>> split_parents(np.array([10, 7, 5]), np.array([3, 1, 8, 12, -2, -1])).tolist()
    [7, 3, 3, 4, 3, 2]
    """
    parents = np.asarray(parents, dtype=np.int64)
    if parents.size and (parents.min() < 0 or parents.max() > MAX_COUNT):
        raise ValueError(f"parent counts must lie in [0, {MAX_COUNT}]")
    a = np.clip(np.asarray(noisy_children, dtype=np.int64).reshape(-1, 2), 0, None)  # C.7: clip
    # Capping a child at MAX_COUNT ≥ m keeps a surplus a surplus, so the output stays
    # comparable with the uncapped vector; it bounds the products below.
    a = np.minimum(a, MAX_COUNT)
    a0, total = a[:, 0], a[:, 0] + a[:, 1]
    m = parents
    quotient, remainder = np.divmod(m * a0, np.maximum(total, 1))  # m·a0 ≤ MAX_COUNT² < 2^63
    # deficit (m ≥ a0+a1): round m·a0/(a0+a1) down; surplus: round it up
    b0 = quotient + ((m < total) & (remainder > 0))
    zero = total == 0  # both children empty: equal split, odd unit by parent parity
    if zero.any():
        parity = (np.flatnonzero(zero) % 2 == 0).astype(np.int64)
        b0[zero] = m[zero] // 2 + (m[zero] % 2) * parity
    return np.stack([b0, m - b0], axis=1).reshape(-1)


def make_consistent(root: int, noisy_levels: Sequence[Counts]) -> list[Counts]:
    """Consistent counts of every level 1..r from the root count and noisy levels 1..r.

    ``noisy_levels[j-1]`` holds the 2^j noisy counts of level j in Morton order. Returns the
    consistent counts of the same levels; each is non-negative, integer, and pairs of children
    add up to their parent, so the last level sums to ``root``.

    >>> [c.tolist() for c in make_consistent(10, [np.array([7, 1]), np.array([0, 0, 3, -4])])]
    [[8, 2], [4, 4, 2, 0]]
    """
    if root < 0:
        raise ValueError("root count must be non-negative")
    out: list[Counts] = []
    parents = np.array([root], dtype=np.int64)
    for j, noisy in enumerate(noisy_levels, start=1):
        noisy = np.asarray(noisy, dtype=np.int64)
        if noisy.shape != (1 << j,):
            raise ValueError(f"level {j} must hold {1 << j} counts")
        parents = split_parents(parents, noisy)
        out.append(parents)
    return out
