"""Time blocks of steps: the online engine for add/remove neighbours and adaptive trees (issue 8).

Layer: core. Time is counted in *steps* s = 1, 2, … (a step ends at every release; its length
is public: ``release_every`` records or an explicit step marker). Block b holds the steps
[2^b, 2^{b+1}) — doubling, like the time levels of HVZ, but over public steps, because under
add/remove the number of records is private and record-count boundaries would move when a
record is added. Every record lies in exactly one block, so by parallel composition each block
may spend the whole per-record budget on its own data (privacy: P9):

* **open-block size** (add/remove only): a Binary Mechanism over the block's steps (Chan et al.
  2011), L = b + 1 heights, node noise Lap_Z(L/ε_n): a step count lies in L nodes → ε_n;
* **at the block's end, a private histogram of its records**: a PrivTree partition
  (:mod:`dpsynth.online.privtree`, ε_s for the whole tree) with noisy leaf counts Lap_Z(1/ε_c)
  (one leaf per record → ε_c);

* **open-block step summaries** (``current_shape="steps"``, the default): at the end of every
  step that does not close its block, a PrivTree histogram of *that step's* records at ε_o
  (30 % decisions, 70 % counts). A record lies in one step, so this costs ε_o once.

A release is post-processing (P6): the completed blocks' histograms, each scaled to its size
estimate, plus the open block's size times a shape: the sum of the open block's step summaries
(``"steps"``: each step leaf's fresh mass, spread inside the leaf like the latest block, so the
release follows the stream as it moves, nothing stays biased under drift, and it tends to the
true prefix as ε grows), the latest block's (``"last"``) or all blocks'
(``"pooled"``) — the last two are kept for reproduction. Materialised at the deepest leaf
depth D and rounded to integers by systematic sampling with a *public* uniform, so the counts sum
to the released size exactly (t under replacement; the noisy total under add/remove).

Neighbours: ``add_remove`` (one record added to or removed from one step): the total per record
is ε_n + ε_s + ε_c = ε. ``replace`` (one record's value changed in place): t and every step's
size are public, no size counter is needed, and the changed record can move between two cells
of the *same* block — group privacy of two, so each block runs at ε/2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth._types import CellIds, Counts, LeafCounts
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.online.block_budget import (
    ADAPTIVE_STRUCTURE_SHARE,
    CURRENT_SHAPES,
    STEP_SHARE,
    STEP_STRUCTURE_SHARE,
    BlockBudget,
    block_budget,
)
from dpsynth.online.privtree import privtree_histogram, privtree_params
from dpsynth.online.rounding import (
    density_at,
    empty_shape,
    fold_refined,
    mass_depth,
    pooled_intervals,
)
from dpsynth.online.steps import StepMechanism, block_of
from dpsynth.online.summary import Summary

#: adaptive releases drop PrivTree leaves whose noisy count is at most this many noise scales:
#: an empty leaf's clipped noise is phantom mass (≈ half a scale each, hundreds of leaves).
LEAF_FLOOR_SCALES = 2.0


class AdaptiveMechanism(StepMechanism):
    """``adaptive``: steps, blocks and their PrivTree histograms for one partition (module
    docstring; P9, P10).

    Not a public entry point: :class:`~dpsynth.online.synthesizer.OnlineSynthesizer` drives it
    through the mechanism protocol (:mod:`dpsynth.online.mechanism`).
    """

    name = "adaptive"

    @staticmethod
    def budget_for(epsilon: float, neighbours: str, current_shape: str) -> BlockBudget:
        """The per-block budget, its worst case checked (privacy: P9)."""
        return block_budget(epsilon, neighbours, structure_share=ADAPTIVE_STRUCTURE_SHARE,
                            step_share=STEP_SHARE if current_shape == "steps" else 0.0)

    def __init__(
        self,
        d: int,
        budget: BlockBudget,
        noise: KeyedNoise,
        context: tuple[int | str, ...],
        max_depth: int,
        current_shape: str = "steps",
    ) -> None:
        if current_shape not in CURRENT_SHAPES:
            raise ConfigError(f"current_shape ({current_shape!r}) must be one of {CURRENT_SHAPES}")
        if (current_shape == "steps") != (budget.steps > 0):
            raise ConfigError("current_shape='steps' needs a step budget (block_budget("
                              "step_share=...)) and the other shapes none")
        privtree_params(budget.structure, max_depth=max_depth)  # fails early if impossible
        super().__init__(d, budget, noise, context, max_depth)
        self.current_shape = current_shape
        self._open: list[CellIds] = []  # records of the open block's completed steps
        self.step_summaries: list[Summary] = []  # the open block's steps (ε_o each)
        self._blocks_depth = 0  # deepest mass depth of the blocks (a release cache)
        self._steps_depth = 0  # deepest mass depth of the step summaries (a release cache)
        self._folded: tuple[int, int, tuple[np.ndarray, np.ndarray]] | None = None  # cache
        self._masses: tuple[Any, ...] | None = None  # release cache: (D, intervals, densities)
        self.params = {"size": budget.size, "structure": budget.structure,
                       "counts": budget.counts, "steps": budget.steps,
                       "current_shape": current_shape,
                       "leaf_floor_scales": LEAF_FLOOR_SCALES}

    # -- ingest ----------------------------------------------------------------------------

    def end_step(self) -> None:
        """Close the open step; at a block's last step, summarise the block privately."""
        self._open.extend(self._pending)
        self._step_counts.append(sum(int(a.size) for a in self._pending))
        step_records, self._pending = self._pending, []
        self.step += 1
        b = block_of(self.step)
        if self.step == (2 << b) - 1:  # the last step of block b
            self.blocks.append(self._summarise(b))
            self._blocks_depth = max(self._blocks_depth, mass_depth(self.blocks[-1]))
            self._open, self._step_counts, self._masses = [], [], None
            self.step_summaries, self._steps_depth, self._folded = [], 0, None
        elif self.budget.steps > 0:
            self.step_summaries.append(self._summarise_step(step_records))
            self._steps_depth = max(self._steps_depth, mass_depth(self.step_summaries[-1]))

    # -- private quantities ------------------------------------------------------------------

    def _summarise(self, b: int) -> Summary:
        size, size_var = self._open_size(b, 1 << b)
        context = (*self._context, "block", b)
        records = np.concatenate(self._open) if self._open else np.zeros(0, np.uint64)
        cells, weights = np.unique(records, return_counts=True)
        return self._block_histogram(cells, weights, size, size_var, context)

    def _block_histogram(self, cells: CellIds, weights: Counts, size: float, size_var: float,
                         context: tuple[int | str, ...]) -> Summary:
        """A completed block's PrivTree histogram (ε_s decisions, ε_c counts) and its size,
        pooled with the noisy leaf sum (post-processing)."""
        depths, prefixes, counts = privtree_histogram(
            cells, weights, self.budget.structure, self.budget.counts, self._noise, context,
            max_depth=self.max_depth,
        )
        leaf_var = depths.size * discrete_laplace_variance(1.0 / self.budget.counts)
        size = self._pooled_size(size, size_var, float(counts.sum()), leaf_var)
        return Summary(depths, prefixes, counts, size)

    def _release_floor(self) -> float:
        """Leaves at most this high are dropped from releases (phantom mass)."""
        return LEAF_FLOOR_SCALES / self.budget.counts

    def _summarise_step(self, records: list[CellIds]) -> Summary:
        """PrivTree histogram of one step's records at ε_o (30 % decisions, 70 % counts)."""
        cells, weights = np.unique(np.concatenate(records) if records else
                                   np.zeros(0, np.uint64), return_counts=True)
        structure = self.budget.steps * STEP_STRUCTURE_SHARE
        counts_eps = self.budget.steps - structure
        depths, prefixes, counts = privtree_histogram(
            cells, weights, structure, counts_eps, self._noise,
            (*self._context, "step", self.step), max_depth=self.max_depth,
        )  # privacy: P9 (one step per record: ε_o = structure + counts)
        floor = LEAF_FLOOR_SCALES / counts_eps
        kept = float(np.where(counts > floor, counts, 0).sum())
        size = float(weights.sum()) if self.budget.neighbours == "replace" else kept
        return Summary(depths, prefixes, counts, size, floor=floor)

    # -- release ------------------------------------------------------------------------------

    def _leaf_counts(self, total: int, open_size: float,
                     placement_seed: bytes) -> LeafCounts:
        """The integer counts of the 2^D cells summing to ``total``: post-processing.

        The measure is piecewise constant on Morton intervals at depth D (the union of the
        blocks' leaves). Its cumulative mass F, scaled to ``total``, is rounded by systematic
        sampling: unit j = 1..total lands in the cell where F crosses j − u, with u a *public*
        uniform — O(total · log K + 2^D), never a pass per leaf and cell.
        """
        if not self.blocks or total == 0:
            return LeafCounts(total, 0, np.array([total], np.int64))
        floor = self._release_floor()
        depth = min(self.max_depth, max(self._blocks_depth, self._steps_depth))
        if self._masses is None or self._masses[0] != depth:  # blocks change at a block's end
            self._masses = pooled_intervals(self.blocks, self.max_depth, floor, depth)
        _, starts, widths, pooled, last = self._masses
        steps = None
        if self.step_summaries:  # the open block's own shape, folded one step at a time
            # the fold's grid holds the blocks' starts (its reference), so it is the union
            grid, steps = self._open_shape(depth, (starts, last), floor)
            widths = np.diff(np.concatenate([grid, [1 << depth]]))
            step_mass = float((steps * widths).sum())
            if step_mass > 0 and self.current_shape == "steps":  # the usual case, first choice
                density = density_at(starts, pooled, grid) + (open_size / step_mass) * steps
                return self._rounded(grid, widths, density, depth, total, placement_seed)
            pooled, last = density_at(starts, pooled, grid), density_at(starts, last, grid)
            starts = grid
        density = pooled
        for reference in self._shapes(steps if steps is not None else np.zeros_like(pooled),
                                      last, pooled):
            ref_mass = float((reference * widths).sum())
            if ref_mass > 0:
                density = pooled + (open_size / ref_mass) * reference
                break
        return self._rounded(starts, widths, density, depth, total, placement_seed)

    def _open_shape(self, depth: int, reference: tuple[np.ndarray, np.ndarray],
                    floor: float) -> tuple[np.ndarray, np.ndarray]:
        """The open block's step summaries folded into one shape (cached; a new depth or a
        new block starts the fold again)."""
        if self._folded is None or self._folded[0] != depth:
            self._folded = (depth, 0, empty_shape())
        _, done, shape = self._folded
        for summary in self.step_summaries[done:]:
            shape = fold_refined(shape, summary, depth, reference, floor)
        self._folded = (depth, len(self.step_summaries), shape)
        return shape

    def _shapes(self, steps: np.ndarray, last: np.ndarray,
                pooled: np.ndarray) -> list[np.ndarray]:
        """Shapes for the open block, first choice first (a shape may hold no mass)."""
        if self.current_shape == "steps":
            return [steps, last, pooled]
        return [last, pooled] if self.current_shape == "last" else [pooled]

    # -- state ---------------------------------------------------------------------------------

    def block_state(self) -> dict[str, Any]:
        """Everything needed to continue identically (no key material)."""
        pending = np.concatenate(self._pending) if self._pending else np.zeros(0, np.uint64)
        records = np.concatenate(self._open) if self._open else np.zeros(0, np.uint64)
        return {"step": self.step, "pending": pending, "open": records,
                "step_counts": list(self._step_counts),
                "blocks": [blk.to_state() for blk in self.blocks],
                "step_summaries": [blk.to_state() for blk in self.step_summaries]}

    def load_block_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`block_state`."""
        self.step = int(state["step"])
        self._pending = [state["pending"]] if state["pending"].size else []
        self._open = [state["open"]] if state["open"].size else []
        self._masses = None
        self._step_counts = [int(c) for c in state["step_counts"]]
        self.blocks = [Summary.from_state(blk) for blk in state["blocks"]]
        self.step_summaries = [Summary.from_state(blk)
                               for blk in state.get("step_summaries", [])]
        self._blocks_depth = max([mass_depth(blk) for blk in self.blocks], default=0)
        self._steps_depth = max([mass_depth(blk) for blk in self.step_summaries], default=0)
        self._folded = None

    @property
    def nbytes(self) -> int:
        """Bytes held: the open block's histogram and the completed blocks' leaves."""
        held = sum(a.nbytes for a in self._open)
        summaries = self.blocks + self.step_summaries
        return held + sum(blk.nbytes for blk in summaries)

