"""2-way marginal workloads (paper 003 Def 7.1) and their answers on weighted records.

Layer: core, no randomness. A workload is a pair of columns ``a < b``; its |X_a|·|X_b| cells are
the value pairs in lexicographic order, cell ``x_a · |X_b| + x_b``. The answer on a dataset is
its contingency table. One record falls into exactly one cell of every workload, so a workload
answer has L1 sensitivity 1 under adding or removing a record (§7.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np


class Workloads:
    """All 2-way workloads of a domain (or a given list of column pairs).

    >>> w = Workloads((2, 3, 2))
    >>> w.pairs, w.cells.tolist()
    ([(0, 1), (0, 2), (1, 2)], [6, 4, 6])
    >>> [m.astype(int).tolist() for m in w.answers(np.array([[1, 2, 0]]))]
    [[0, 0, 0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0, 1, 0]]
    """

    def __init__(self, sizes: Sequence[int], pairs: Sequence[tuple[int, int]] | None = None):
        self.sizes = tuple(int(s) for s in sizes)
        if pairs is None:
            pairs = list(combinations(range(len(self.sizes)), 2))
        self.pairs = [(int(a), int(b)) for a, b in pairs]
        self.cells = np.array([self.sizes[a] * self.sizes[b] for a, b in self.pairs], np.int64)
        self.offsets = np.concatenate(([0], np.cumsum(self.cells)))

    def __len__(self) -> int:
        return len(self.pairs)

    def cell_index(self, codes: np.ndarray, i: int) -> np.ndarray:
        """Cell of workload ``i`` of every row of ``codes``."""
        a, b = self.pairs[i]
        cells: np.ndarray = codes[:, a] * self.sizes[b] + codes[:, b]
        return cells

    def flat_index(self, codes: np.ndarray) -> np.ndarray:
        """(n, W) global cell indices (workload i's cells start at ``offsets[i]``)."""
        out = np.empty((codes.shape[0], len(self.pairs)), dtype=np.int64)
        for i in range(len(self.pairs)):
            out[:, i] = self.cell_index(codes, i) + self.offsets[i]
        return out

    def answer(self, codes: np.ndarray, i: int, weights: np.ndarray | None = None) -> np.ndarray:
        """Contingency table of workload ``i`` (float64; weighted if ``weights`` is given)."""
        return np.bincount(self.cell_index(codes, i), weights=weights,
                           minlength=int(self.cells[i])).astype(np.float64)

    def answers_flat(self, flat: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Every workload's table at once, concatenated, from :meth:`flat_index` output."""
        w = None if weights is None else np.repeat(weights, flat.shape[1])
        return np.bincount(flat.ravel(), weights=w, minlength=int(self.offsets[-1])).astype(
            np.float64)

    def split(self, flat_answer: np.ndarray) -> list[np.ndarray]:
        """A concatenated answer cut into one table per workload."""
        return [flat_answer[self.offsets[i]:self.offsets[i + 1]] for i in range(len(self.pairs))]

    def answers(self, codes: np.ndarray, weights: np.ndarray | None = None) -> list[np.ndarray]:
        """Every workload's table."""
        return self.split(self.answers_flat(self.flat_index(codes), weights))
