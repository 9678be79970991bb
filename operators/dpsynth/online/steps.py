"""What every step mechanism shares: public steps, doubling blocks and the open-block size.

Layer: core. Time is counted in *steps* s = 1, 2, … (a step ends at every release: public
time, ``release_every`` records under replacement or an explicit step marker). Block b holds the
steps [2^b, 2^{b+1}), so every record lies in exactly one block (privacy: P9). Under add/remove
the records of the open block are counted by a Binary Mechanism over its steps (Chan et al.
2011; L = b + 1 heights, node noise Lap_Z(L/ε_n): a step count lies in L nodes → ε_n).

:class:`StepMechanism` implements the parts of the mechanism protocol
(:mod:`dpsynth.online.mechanism`) that do not depend on how a block is summarised; subclasses
(:mod:`~dpsynth.online.blocks`, :class:`~dpsynth.online.guided.GuidedMechanism`)
implement ``end_step``, ``_leaf_counts`` and their state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth._types import CellIds, LeafCounts
from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.online.block_budget import BlockBudget
from dpsynth.online.rounding import round_density
from dpsynth.online.summary import Summary


def block_of(step: int) -> int:
    """The block of step s ≥ 1: b = ⌊log2 s⌋ (block b = steps [2^b, 2^{b+1}))."""
    return int(step).bit_length() - 1


def _dyadic_nodes(k: int, heights: int) -> list[tuple[int, int]]:
    """Binary Mechanism nodes (height i, index) whose p-sums make the prefix of k steps."""
    nodes, position = [], 0
    for i in range(heights - 1, -1, -1):
        if k >> i & 1:
            nodes.append((i, position >> i))
            position += 1 << i
    return nodes


class StepMechanism:
    """Public steps and doubling blocks of one partition (module docstring); abstract."""

    counts_records = False  # time is public steps: any neighbour notion
    name = ""  # each concrete mechanism's (release metadata ``schedule``)

    def __init__(self, d: int, budget: BlockBudget, noise: KeyedNoise,
                 context: tuple[int | str, ...], max_depth: int) -> None:
        self.d = d
        self.budget = budget
        self.max_depth = max_depth
        self._noise = noise
        self._context = context
        self.step = 0  # completed steps
        self._pending: list[CellIds] = []  # records of the open step
        self._step_counts: list[int] = []  # open block: true count of each completed step
        self.blocks: list[Summary] = []  # completed blocks: leaves and size estimate
        self.worst_case_loss = budget.worst_case_loss

    # -- the mechanism protocol (dpsynth.online.mechanism) -------------------------------------

    def tick_limit(self, t: int) -> int:
        """No level boundary: a step ends only when the caller ends it."""
        return 1 << 62

    def end_tick(self, t: int) -> None:
        """A tick is a step here."""
        self.end_step()

    def end_step(self) -> None:  # pragma: no cover - abstract
        """Close the open step."""
        raise NotImplementedError

    def depth(self, t: int) -> int | None:
        """None: the depth is that of the latest release (a function of released leaves)."""
        return None

    def extra_metadata(self) -> dict[str, Any]:
        """The number of completed (public) steps."""
        return {"step": self.step}

    @property
    def n_cells(self) -> int:
        """Leaves of the completed blocks."""
        return sum(b.leaves for b in self.blocks)

    def state(self) -> dict[str, Any]:
        """Snapshot entries: the engine under ``blocks``."""
        return {"blocks": self.block_state()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.load_block_state(state["blocks"])

    def block_state(self) -> dict[str, Any]:  # pragma: no cover - abstract
        """Everything needed to continue identically (no key material)."""
        raise NotImplementedError

    def load_block_state(self, state: dict[str, Any]) -> None:  # pragma: no cover - abstract
        """Inverse of :meth:`block_state`."""
        raise NotImplementedError

    def add(self, addresses: CellIds) -> None:
        """Records of the open step (Morton addresses at ``max_depth``)."""
        if addresses.size:
            self._pending.append(np.asarray(addresses, dtype=np.uint64))

    # -- the open block's size ------------------------------------------------------------------

    def _open_size(self, b: int, steps: int) -> tuple[float, float]:
        """(estimate, variance) of the records in the first ``steps`` steps of open block b."""
        exact = float(sum(self._step_counts[:steps]))
        if self.budget.neighbours == "replace":
            return exact, 0.0  # public under replacement
        heights = b + 1
        scale = heights / self.budget.size
        nodes = _dyadic_nodes(steps, heights)
        if not nodes:
            return 0.0, 0.0
        index = np.array([n[1] for n in nodes], np.uint64)
        height = np.array([n[0] for n in nodes], np.uint64)
        lap = self._noise.discrete_laplace_at(scale, (*self._context, "size", b), index, height)
        return exact + float(lap.sum()), len(nodes) * discrete_laplace_variance(scale)

    def _open_estimate(self, b: int, steps: int) -> float:
        """The open block's size in a release: the Binary Mechanism's (exact under replace)."""
        return self._open_size(b, steps)[0]

    def _pooled_size(self, size: float, size_var: float, leaf_sum: float,
                     leaf_var: float) -> float:
        """Inverse-variance pool of a Binary Mechanism total and a noisy leaf sum (post-
        processing; the size alone when it is public)."""
        if size_var <= 0:
            return size
        w = leaf_var / (leaf_var + size_var)
        return w * size + (1 - w) * leaf_sum

    # -- release ------------------------------------------------------------------------------

    def release_counts(self, records: int, placement_seed: bytes) -> LeafCounts:
        """The released size, depth D and integer counts of the 2^D cells summing to the size
        (sparse, once rounded).

        The size is ``records`` under replacement (public) and, under add/remove, the completed
        blocks' sizes plus the open block's noisy size, rounded and clipped at 0 (P9).
        """
        b = block_of(self.step + 1)  # the open block
        open_size = self._open_estimate(b, len(self._step_counts))
        total = records
        if self.budget.neighbours == "add_remove":  # the count is private: a noisy size
            estimate = sum(float(blk.size) for blk in self.blocks) + open_size
            total = max(int(round(estimate)), 0)  # privacy: P9
        return self._leaf_counts(total, max(open_size, 0.0), placement_seed)

    def _leaf_counts(self, total: int, open_size: float,
                     placement_seed: bytes) -> LeafCounts:  # pragma: no cover
        """The counts of the leaves summing to ``total`` (post-processing)."""
        raise NotImplementedError

    def _rounded(self, starts: np.ndarray, widths: np.ndarray, density: np.ndarray, depth: int,
                 total: int, placement_seed: bytes) -> LeafCounts:
        """A density rounded to ``total`` units (:func:`round_density`, post-processing), kept
        sparse; a release builds its 2^D counts from it only if asked."""
        depth, cells, values = round_density(starts, widths, density, depth, total,
                                             placement_seed, self.step)
        if depth == 0:
            return LeafCounts(total, 0, values)  # the whole cube: one cell
        return LeafCounts(total, depth, occupied=(cells, values))
