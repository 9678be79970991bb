"""Guided step blocks: octal time nodes and partitions chosen from released summaries (issue 14).

Layer: core. The default for every d (``mechanism="auto"``; docs/decisions/0001). Time is
public steps in doubling blocks, as for ``adaptive`` (:mod:`dpsynth.online.steps`); what differs
is how a block's records are summarised while it is open and when it closes:

* **Time nodes.** Inside block b the steps are grouped like the digits of an octal counter: a
  node of level l holds 8^l consecutive steps (l = 0 … ⌊(b−1)/3⌋, so every node is smaller than
  the block). A record lies in exactly one node per level and in the block. When a node
  completes it is summarised at ε_l = ε_o / (number of levels); when the block completes it is
  summarised at ε_top. The open block's prefix of k steps is covered by at most 7 nodes per
  level (k written in base 8), so a release sums O(log k) summaries instead of k step
  summaries, and the large nodes see enough records to resolve fine structure. A Binary
  Mechanism (binary digits, budget split over ⌈log2⌉ heights) gives each node less of the
  budget at the sizes that matter (docs/decisions/0003).
* **Guided partitions, no structure budget.** Every summary is a flat histogram: noisy counts
  c(leaf) + Lap_Z(1/ε) on a partition into Morton cells. The partition is a deterministic
  function of summaries *already released* — the node's children (level l − 1) for a node, its
  cover for the block, for a step the latest step summary and, where larger, the released
  history (the closed blocks, scaled to :data:`HISTORY_SHARE` of the latest step's mass;
  steps at a summary ε ≤ :data:`HISTORY_MAX_EPSILON`), so that places the
  stream held are split even when the latest step saw nothing there, and records arriving next
  to them are not one coarse leaf that the release's EM step fills toward the old place — so it
  costs no budget
  (post-processing; PrivTree's decisions cost ε_s, a share of a block's budget). A cell v of
  depth k is split while its guide mass m(v) times its ℓ∞ diameter D_k = 2^−⌊k/d⌋ exceeds
  θ·E|Lap_Z(1/ε)| (≈ θ/ε; → 0 at large ε; in d = 2 a cell split along x is split along y too
  where the guide is dense: :mod:`~dpsynth.online.guided.partition`): m·D bounds the tree-W1
  cost of spreading v's records uniformly over v, and E|noise| ≈ 1/ε is the
  scale of one more leaf's noise. A region the guide thinks empty stays one coarse leaf whose
  noisy count still measures what arrived there; the next summaries split it.
* **Reuse of the time nodes** (:mod:`dpsynth.online.guided.node_reuse`). A node of level l ≥ 1 and
  a closing block measure records that their children (the level below; for a block, its top
  time nodes) measured too, with independent noise. Their counts are combined with the
  children's by generalised least squares on the common coarsening of the partitions (Honaker
  2015): released noisy counts only. Before, a block's nodes were dropped when it closed.
* **Paid refinement at large ε** (:mod:`dpsynth.online.guided.refinement`). Released summaries
  cannot locate records fresh to them (each time level refines a record's leaf by three depths;
  block 0 has no guide), which caps the error far above the tree's resolution at large ε. A summary
  whose own ε is at least 32 spends half of it on PrivTree decisions over its records and counts
  the common refinement of both partitions at the rest (docs/decisions/0004). Every summary
  at a per-record ε ≤ 16 is below 32, so those releases are unchanged.
* **Release** (post-processing, P6): the completed blocks and the open block's cover, each
  clipped at a floor of one noise scale (d = 1) or two (d ≥ 2) — higher where the summary's guide
  expected no record, so that pure noise keeps about half a leaf per summary
  (:mod:`dpsynth.online.guided.floors`: the phantom mass of empty leaves was the coarse part of the
  error and a bias toward the centre on concentrated streams) — and scaled to its size (public;
  the pooled noisy sizes under add/remove) — a closed block for d ≥ 2 after its dropped leaves'
  noisy counts went to the kept leaves nearest to them (:mod:`~dpsynth.online.guided.local_mass`:
  thin regions keep their mass, phantoms lose some) — summed, then every leaf's mass is spread
  inside the leaf like that sum, and again like the result (two steps of the EM algorithm for
  a common density, :data:`~dpsynth.online.guided.em.EM_STEPS`: fine structure seen by one summary
  sharpens the others' coarse leaves); a coarse cell between a sparser and a denser face
  neighbour then leans toward the denser one (:mod:`~dpsynth.online.guided.tilt`: records across a
  cell edge from a city no longer sit at the cell's centre), and the result is rounded by
  systematic sampling.

The stages of a summary and of a release, in the order they run, each with its privacy argument,
are the tuples of :mod:`~dpsynth.online.guided.pipeline` (docs/architecture.md, "The default
mechanism's pipeline"); this module keeps the time nodes, blocks and caches, reads the released
summaries the stages need, and runs them.

Privacy (docs/privacy.md P16): under add/remove one record changes one leaf count of each
summary that contains it — its block's and one node per level — and the open block's size
counter: ε_n + ε_top + Σ_l ε_l = ε per block, and blocks are disjoint (parallel composition).
Partitions are functions of earlier outputs (adaptive composition: they add nothing), refined
from a summary ε of 32 on by a PrivTree paid from that summary's ε (ε_s + ε_c = its ε; P10).
Under replacement the changed record stays in its step: every summary sees one removal and one
addition, so each block runs at ε/2.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import numpy as np

from dpsynth._types import CellIds, LeafCounts
from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.online.block_budget import GUIDED_STEP_SHARE, BlockBudget, block_budget
from dpsynth.online.guided import pipeline
from dpsynth.online.guided.em import split_sums, stacked_parts
from dpsynth.online.guided.partition import SPLIT_THRESHOLD
from dpsynth.online.guided.pipeline import (
    CLOSED_BLOCK_STAGES,
    HISTORY_MAX_EPSILON,
    RELEASE_STAGES,
    SUMMARY_STAGES,
    ClosedWork,
    ReleaseWork,
    SummaryWork,
)
from dpsynth.online.rounding import block_intervals, mass_depth, union_grid
from dpsynth.online.steps import StepMechanism, block_of
from dpsynth.online.summary import Summary

#: A node of level l holds 8^l steps.
TIME_FANOUT_BITS = 3
#: Leaves whose noisy count is at most this many noise scales are dropped, for d = 1 and for
#: d ≥ 2: an empty leaf's clipped noise is phantom mass spread over its cell, which pulls a release
#: toward the cube's centre where cells are many (two scales pull less than one at d ≥ 2; at
#: d = 1 one scale has no bias and two cost accuracy: docs/decisions/0003).
LEAF_FLOOR_SCALES = (1.0, 2.0)


def node_levels(b: int) -> range:
    """The time levels of block b: l with 8^l < 2^b (none for block 0, a single step)."""
    return range((b - 1) // TIME_FANOUT_BITS + 1) if b >= 1 else range(0)


class GuidedMechanism(StepMechanism):
    """Octal time nodes with guided histograms for one partition (module docstring).

    Driven by :class:`~dpsynth.online.synthesizer.OnlineSynthesizer` through the mechanism
    protocol with ``mechanism="guided"``.
    """

    name = "guided"

    @staticmethod
    def budget_for(epsilon: float, neighbours: str) -> BlockBudget:
        """The per-block budget, its worst case checked (privacy: P16)."""
        return block_budget(epsilon, neighbours, step_share=GUIDED_STEP_SHARE)

    def __init__(self, d: int, budget: BlockBudget, noise: KeyedNoise,
                 context: tuple[int | str, ...], max_depth: int,
                 disabled: Iterable[str] = ()) -> None:
        super().__init__(d, budget, noise, context, max_depth)
        self._step_records: list[CellIds] = []  # the open block's completed steps
        self.nodes: dict[tuple[int, int], Summary] = {}  # open block: (level, index)
        self._recent: Summary | None = None  # the latest step summary: a step's guide
        self._blocks_depth = 0  # deepest mass depth of the blocks (a release cache)
        #: the closed blocks' stacked intervals per depth (a release cache: emptied at each
        #: block's end, with the blocks' own derived values, and on restore)
        self._closed_cache: dict[int, Any] = {}
        self._floor_scales = LEAF_FLOOR_SCALES[0 if d == 1 else 1]
        self.params = {"size": budget.size, "counts": budget.counts, "steps": budget.steps,
                       "time_fanout": 1 << TIME_FANOUT_BITS, "split_threshold": SPLIT_THRESHOLD,
                       "leaf_floor_scales": self._floor_scales}
        self.disable(disabled)  # benchmarks only: the default runs every stage

    def disable(self, names: Iterable[str]) -> None:
        """Benchmarks only: skip the named stages of :mod:`~dpsynth.online.guided.pipeline`
        from now on (none: every stage runs, the product). Switchable stages only; not a
        setting, and not in params, releases or snapshots (the pipeline's docstring)."""
        self.disabled = pipeline.checked_disabled(names)
        self._summary_stages = pipeline.enabled(SUMMARY_STAGES, self.disabled, self.d)
        self._closed_stages = pipeline.enabled(CLOSED_BLOCK_STAGES, self.disabled, self.d)
        self._release_stages = pipeline.enabled(RELEASE_STAGES, self.disabled, self.d)
        self._forget_derived()  # closed blocks are read through their stages

    # -- ingest ----------------------------------------------------------------------------

    def end_step(self) -> None:
        """Close the open step: summarise every node (and the block) that it completes."""
        records = np.concatenate(self._pending) if self._pending else np.zeros(0, np.uint64)
        self._pending = []
        self._step_records.append(records)
        self._step_counts.append(int(records.size))
        self.step += 1
        b = block_of(self.step)
        length = 1 << b
        position = self.step - length + 1  # steps of block b completed
        levels = node_levels(b)
        for level in levels:  # bottom-up: a node's guide is its children, just released
            width = 1 << (TIME_FANOUT_BITS * level)
            if position % width == 0:
                index = position // width - 1
                self.nodes[(level, index)] = self._summarise_node(b, level, index, position)
        if position == length:  # the block is complete
            self.blocks.append(self._summarise_block(b, len(levels)))
            self._blocks_depth = max(self._blocks_depth, mass_depth(self.blocks[-1]))
            self._step_records, self._step_counts, self.nodes = [], [], {}
            self._forget_derived()

    def _cover(self, b: int, position: int) -> list[Summary]:
        """Block b's nodes covering its first ``position`` steps (base-8 digits)."""
        out, start = [], 0
        for level in reversed(node_levels(b)):
            width = 1 << (TIME_FANOUT_BITS * level)
            while position - start >= width:
                out.append(self.nodes[(level, start // width)])
                start += width
        return out

    # -- private summaries -------------------------------------------------------------------

    def _summarise_node(self, b: int, level: int, index: int, position: int) -> Summary:
        width = 1 << (TIME_FANOUT_BITS * level)
        records = np.concatenate(self._step_records[position - width:position])
        epsilon = self.budget.steps / len(node_levels(b))
        # a step: the latest step, and the closed blocks where they expect more (docstring)
        history = level == 0 and bool(self.blocks) and epsilon <= HISTORY_MAX_EPSILON
        if level == 0:
            guides = [self._recent] if self._recent is not None else []
        else:
            fanout = 1 << TIME_FANOUT_BITS
            guides = [self.nodes[(level - 1, index * fanout + i)] for i in range(fanout)]
        summary = self._histogram(records, guides, epsilon, (*self._context, "node", b, level,
                                                              index), history=history,
                                  reuse=guides if level else None)
        if level == 0:
            self._recent = summary
        return summary

    def _summarise_block(self, b: int, levels: int) -> Summary:
        records = np.concatenate(self._step_records)
        length = 1 << b
        guides = self._cover(b, length) if levels else (
            [self._recent] if self._recent is not None else [])
        epsilon = self.budget.counts + (0.0 if levels else self.budget.steps)
        size, size_var = self._open_size(b, length)  # released: may guide (block 0)
        summary = self._histogram(records, guides, epsilon, (*self._context, "block", b),
                                  max(size, 0.0), reuse=guides if levels else None)
        leaf_var = self._leaf_variance(summary)
        summary.size = self._pooled_size(size, size_var, summary.size, leaf_var)
        if not levels:
            self._recent = summary
        return summary

    def _histogram(self, records: CellIds, guides: list[Summary], epsilon: float,
                   context: tuple[int | str, ...], expected: float = 0.0,
                   history: bool = False, reuse: list[Summary] | None = None) -> Summary:
        """Noisy leaf counts at ``epsilon`` on the partition the guides choose, refined at
        large ``epsilon`` by a PrivTree paid from it (privacy: P16): the summary stages of
        :mod:`~dpsynth.online.guided.pipeline`, in order. Without guides, a uniform guide of the
        public size or of ``expected`` (a released noisy size). ``history``: the closed blocks
        guide too, where they exceed the guides (:meth:`_guide`)."""
        public = float(records.size) if self.budget.neighbours == "replace" else None
        work = SummaryWork(records, epsilon, context, self._noise, self.d, self.max_depth,
                           public, expected, self._floor_scales, reuse)
        if guides:  # released summaries on one grid
            (work.depth, work.starts, work.widths, work.guide, work.past,
             work.mass) = self._guide(guides, history, public)
        pipeline.run(self._summary_stages, work)
        depths, prefixes, counts = work.depths, work.prefixes, work.counts
        assert depths is not None and prefixes is not None and counts is not None
        epsilon = work.epsilon  # what the counts were drawn at
        floor = self._floor_scales / epsilon
        floored = counts if work.floored is None else work.floored
        dropped = np.flatnonzero(floored != counts)
        kept = float(np.where(floored > floor, floored, 0).sum())
        return Summary(depths, prefixes, floored, public if public is not None else kept,
                       floor=floor, scale=1.0 / epsilon,
                       dropped=dropped if dropped.size else None,
                       dropped_counts=counts[dropped] if dropped.size else None)

    # -- release ------------------------------------------------------------------------------

    def _open_estimate(self, b: int, steps: int) -> float:
        """The open block's size: public, or the Binary Mechanism pooled with the cover's sums."""
        size, size_var = self._open_size(b, steps)
        cover = self._cover(b, steps)
        if size_var <= 0 or not cover:
            return size
        leaf_var = sum(self._leaf_variance(s) for s in cover)
        return self._pooled_size(size, size_var, sum(float(s.size) for s in cover), leaf_var)

    def _leaf_counts(self, total: int, open_size: float,
                     placement_seed: bytes) -> LeafCounts:
        """Closed blocks plus the open block's cover (scaled to ``open_size``), EM steps,
        rounded to ``total``: the release stages of :mod:`~dpsynth.online.guided.pipeline`, in
        order (module docstring; post-processing)."""
        cover = self._cover(block_of(self.step + 1), len(self._step_counts))
        cover_size = sum(float(s.size) for s in cover)
        scale = open_size / cover_size if cover_size > 0 else 1.0
        if not (self.blocks or cover) or total == 0:
            return LeafCounts(total, 0, np.array([total], np.int64))
        depth = min(self.max_depth, max([self._blocks_depth] + [self._mass_depth(s)
                                                                for s in cover]))
        # the closed blocks (stacked once per depth: they change only at a block's end), then
        # each covering node scaled to the open block's size estimate (its share of it)
        closed = self._closed_parts(depth) if self.blocks else None
        parts = [self._intervals(s, depth) for s in cover]
        rounded = partial(self._rounded, total=total, placement_seed=placement_seed)
        work = pipeline.run(self._release_stages,
                            ReleaseWork(depth, self.d, closed, parts, scale, rounded))
        assert work.counts is not None
        return work.counts

    def _guide(self, guides: list[Summary], history: bool, public: float | None
               ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, float]:
        """(D, starts, widths, the guides' density, the history's density or None, the guides'
        mass) on one grid. The guides' density is summed and scaled to the public size when
        there is one (their shape only). With ``history``, the closed blocks' summed density is
        scaled to the guides' mass (its shape only); a caller takes the pointwise larger of the
        guides and :data:`HISTORY_SHARE` × the history, so a partition is at least as fine as
        the guides alone make it, and no finer where both agree
        (docs/decisions/0007). Released summaries only (P16); ``history``
        needs a closed block."""
        depth = min(self.max_depth, max([self._mass_depth(g) for g in guides]
                                        + ([self._blocks_depth] if history else [])))
        parts = [self._intervals(g, depth) for g in guides]
        past = None
        if history:  # the closed blocks, summed once per depth (the release's cache)
            grid, _, _, _, pooled = self._closed_parts(depth)
            starts, guide, past = split_sums([*parts, (grid, pooled)], len(guides))
            widths = np.diff(np.concatenate([starts, [1 << depth]]))
        else:
            starts, widths, densities = union_grid(parts, depth)
            guide = np.sum(densities, axis=0)
        mass = float((guide * widths).sum())
        scale = public / mass if public is not None and mass > 0 else 1.0
        if past is not None:
            total = float((past * widths).sum())
            past = past * (mass * scale / total) if total > 0 and mass > 0 else None
        return depth, starts, widths, guide * scale, past, mass * scale

    def _closed_parts(self, depth: int) -> Any:
        """The closed blocks' intervals at ``depth``, stacked once per depth (they change only
        at a block's end)."""
        if depth not in self._closed_cache:
            self._closed_cache[depth] = stacked_parts(
                [self._closed_intervals(blk, depth) for blk in self.blocks])
        return self._closed_cache[depth]

    def _forget_derived(self) -> None:
        """Empty the release caches (a block's end, a restore): the new depth needs others."""
        self._closed_cache = {}
        for summary in self.blocks:
            summary.forget_derived()

    @staticmethod
    def _leaf_variance(summary: Summary) -> float:
        """The variance of a summary's leaf sum: leaves × Var Lap_Z(scale) (cached)."""
        assert summary.scale is not None  # guided's summaries record their scale
        scale = summary.scale
        return summary.derived("leaf variance", lambda: summary.leaves *
                               discrete_laplace_variance(scale))

    @staticmethod
    def _mass_depth(summary: Summary) -> int:
        """:func:`mass_depth` of a released summary (cached)."""
        return summary.derived("mass depth", lambda: mass_depth(summary))

    @staticmethod
    def _intervals(summary: Summary, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`block_intervals` of a released summary at ``depth`` (cached)."""
        return summary.derived(depth, lambda: block_intervals(summary, depth))

    def _closed_intervals(self, summary: Summary, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """A closed block as a release and the steps' history read it: through the closed-block
        stages of :mod:`~dpsynth.online.guided.pipeline` (for d ≥ 2 its dropped leaves' noisy
        mass placed locally), else, none running, as :meth:`_intervals` (cached)."""
        if not self._closed_stages:
            return self._intervals(summary, depth)
        return summary.derived(("local", depth), lambda: block_intervals(
            pipeline.run(self._closed_stages, ClosedWork(summary)).summary, depth))

    # -- state ---------------------------------------------------------------------------------

    def block_state(self) -> dict[str, Any]:
        """Everything needed to continue identically (no key material)."""
        pending = np.concatenate(self._pending) if self._pending else np.zeros(0, np.uint64)
        return {"step": self.step, "pending": pending,
                "step_records": [a.copy() for a in self._step_records],
                "blocks": [blk.to_state() for blk in self.blocks],
                "nodes": [{"level": level, "index": index, **summary.to_state()}
                          for (level, index), summary in self.nodes.items()],
                "recent": None if self._recent is None else self._recent.to_state()}

    def load_block_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`block_state`."""
        self.step = int(state["step"])
        self._pending = [state["pending"]] if state["pending"].size else []
        self._step_records = [np.asarray(a, np.uint64) for a in state["step_records"]]
        self._step_counts = [int(a.size) for a in self._step_records]
        self.blocks = [Summary.from_state(blk) for blk in state["blocks"]]
        self.nodes = {(int(entry["level"]), int(entry["index"])): Summary.from_state(entry)
                      for entry in state["nodes"]}
        self._recent = None if state["recent"] is None else Summary.from_state(state["recent"])
        self._blocks_depth = max([mass_depth(blk) for blk in self.blocks], default=0)
        self._closed_cache = {}

    @property
    def nbytes(self) -> int:
        """Bytes held: the open block's records and every summary's leaves."""
        held = sum(a.nbytes for a in self._step_records)
        summaries = self.blocks + list(self.nodes.values())
        return held + sum(s.nbytes for s in summaries)
