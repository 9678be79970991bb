"""The default mechanism's pipeline: its stages, in the order they run, each with its privacy.

Layer: core (docs/privacy.md P16, P6; docs/architecture.md, "The default mechanism's pipeline").
:class:`~dpsynth.online.guided.mechanism.GuidedMechanism` runs three ordered tuples of
:class:`Stage` — a name, a function of one work record (what the stage reads and writes), its
privacy argument and the docs/privacy.md claim that makes it — and nothing else:

* :data:`SUMMARY_STAGES`, for each summary it makes (a time node when it completes, a block when
  it closes): the partition chosen from released summaries, the paid refinement at large ε,
  the noisy leaf counts, their reuse with the children's counts, the floors;
* :data:`CLOSED_BLOCK_STAGES`, for each closed block as releases and the steps' history guide
  read it: its dropped leaves' noisy mass placed locally (d ≥ 2);
* :data:`RELEASE_STAGES`, for each release: the closed blocks and the open block's cover, scaled
  to its size estimate, summed; the EM steps; the tilt of coarse cells; the rounding.

Before these run, the mechanism reads the released summaries a stage needs (the guides, the
closed blocks, the open block's cover) at one depth: released values only.

**Switching stages (benchmarks only).** ``GuidedMechanism(..., disabled={...})`` (or
:meth:`~dpsynth.online.guided.mechanism.GuidedMechanism.disable`) skips the named stages, so a
benchmark can measure what each buys. It is not a setting: nothing in ``params/``, the
commands, the worker, release metadata or snapshots knows it, and a release made with a stage
off is not the product's. Only a stage with ``switchable=True`` may be named: a skipped stage
leaves the work record as it found it. Every switchable stage is post-processing except the
paid refinement, whose skipping gives its share ε_s back to the summary's counts: the summary
still spends exactly its ε, so the accounting (``worst_case_loss``, P16) is unchanged. The
stages that draw the counts, choose the partition, sum the parts and round cannot be switched.

**Adding a stage:** its concept in a module of this package (with its test), its function of a
work record here, and one :class:`Stage` in the tuple, at the place where it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from dpsynth._types import CellIds, LeafCounts
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.online.guided.em import Pooled, StackedParts, em_steps, pooled_parts
from dpsynth.online.guided.floors import (
    EXPECTED_EMPTY,
    floored_counts,
    guide_expects_empty,
    self_empty,
)
from dpsynth.online.guided.local_mass import locally_placed
from dpsynth.online.guided.node_reuse import combined_counts
from dpsynth.online.guided.partition import guided_partition, split_threshold
from dpsynth.online.guided.refinement import refined_partition
from dpsynth.online.guided.tilt import tilted_density
from dpsynth.online.privtree import noisy_leaf_counts
from dpsynth.online.summary import Summary

#: A step's partition is guided by the latest step summary and, where it is larger, the released
#: history (the closed blocks) scaled to this share of the latest step's mass (docs/decisions/0007).
HISTORY_SHARE = 1.0
#: The history guides steps whose own ε is at most this (every step at a per-record ε ≤ 10):
#: above it a step splits to ``max_depth`` wherever a guide holds a quarter of a record, and on
#: spread data the history's leaves made the default slower at large ε (docs/decisions/0007).
HISTORY_MAX_EPSILON = 8.0
#: In the floors' guide the history is scaled so that this many noise scales of the summary read
#: as the floors' bar of half a record (never above full weight): at small ε a few records of
#: history are far below the noise and must not lower the floors of leaves the latest step left
#: empty (docs/decisions/0007).
HISTORY_FLOOR_SCALES = 1.0
#: Share of a guide's mass added uniformly before a partition is chosen (consistency under drift).
UNIFORM_PRIOR = 0.03

#: The privacy arguments a stage can make (docs/privacy.md).
POST_PROCESSING = "post-processing (P6)"
W = TypeVar("W")


@dataclass(frozen=True)
class Stage(Generic[W]):
    """One named stage: ``run`` reads and writes a work record ``W``."""

    name: str
    run: Callable[[W], None]
    privacy: str  # POST_PROCESSING, or the budget share it spends
    claim: str  # the docs/privacy.md claim that makes the argument
    buys: str  # what it is for, in one line
    switchable: bool = True  # may a benchmark skip it (module docstring)
    min_d: int = 1  # it runs at d ≥ min_d only


# -- one summary (a time node or a block) --------------------------------------------------------

@dataclass
class SummaryWork:
    """A summary being made: the records, its ε, and the guides read by the mechanism (released
    summaries on one grid: ``starts``/``widths`` at ``depth``; None without a guide)."""

    records: CellIds
    epsilon: float  # the summary's; the refinement leaves the counts' share
    context: tuple[int | str, ...]
    noise: KeyedNoise
    d: int
    max_depth: int
    public: float | None  # the public size (replacement), else None
    expected: float  # without guides: a released noisy size for the uniform guide
    floor_scales: float
    reuse: list[Summary] | None  # summaries that measured these records too (children)
    depth: int = 0
    starts: np.ndarray | None = None
    widths: np.ndarray | None = None
    guide: np.ndarray | None = None  # the guides' density
    past: np.ndarray | None = None  # the history's density (closed blocks), if it guides
    mass: float = 0.0  # the guides' mass
    depths: np.ndarray | None = None
    prefixes: CellIds | None = None
    counts: np.ndarray | None = None
    floored: np.ndarray | None = None  # counts after the floors (None: as counted)


def _partition(w: SummaryWork) -> None:
    """The partition chosen from the guides (and the history, and a uniform prior): a cell is
    split while guide mass × diameter beats a leaf's noise (:mod:`.partition`)."""
    starts = np.zeros(1, np.int64) if w.starts is None else w.starts
    widths = np.ones(1) if w.widths is None else w.widths
    density = np.array([w.public if w.public is not None else w.expected])
    if w.guide is not None:
        density = w.guide if w.past is None else np.maximum(w.guide, HISTORY_SHARE * w.past)
        # a uniform prior: where the guide saw nothing the records of this summary may
        # still be (a stream that moves); as ε grows every region is split finely
        density = density + UNIFORM_PRIOR * w.mass / float(1 << w.depth)
    w.depths, w.prefixes = guided_partition(starts, density, w.depth, split_threshold(w.epsilon),
                                            w.d, w.max_depth, widths)


def _refinement(w: SummaryWork) -> None:
    """From a summary ε of 32 on, a PrivTree over the records refines the partition, paid from
    the summary's ε (:mod:`.refinement`); below it nothing changes."""
    assert w.depths is not None and w.prefixes is not None
    w.depths, w.prefixes, w.epsilon = refined_partition(
        w.records, w.depths, w.prefixes, w.epsilon, w.noise, w.context, max_depth=w.max_depth)


def _counts(w: SummaryWork) -> None:
    """Noisy leaf counts c(leaf) + Lap_Z(1/ε) at the ε left (privacy: P16)."""
    assert w.depths is not None and w.prefixes is not None
    w.counts = noisy_leaf_counts(w.records, None, w.depths, w.prefixes, w.epsilon, w.noise,
                                 w.context, address_depth=w.max_depth)


def _node_reuse(w: SummaryWork) -> None:
    """A node of level ≥ 1 or a closing block: its counts and its children's, combined by least
    squares (:mod:`.node_reuse`)."""
    if w.reuse:
        assert w.depths is not None and w.prefixes is not None and w.counts is not None
        w.counts = combined_counts(w.depths, w.prefixes, w.counts, w.epsilon, w.reuse,
                                   w.max_depth)


def _floors(w: SummaryWork) -> None:
    """Where the guide (or, without one, the summary itself) expects nothing, a higher floor
    against phantom mass (:mod:`.floors`); the history counts there in proportion to the noise
    (:data:`HISTORY_FLOOR_SCALES`)."""
    assert w.depths is not None and w.prefixes is not None and w.counts is not None
    guide = w.guide
    if guide is not None and w.past is not None:
        guide = np.maximum(guide, HISTORY_SHARE * w.past * min(
            1.0, EXPECTED_EMPTY * w.epsilon / HISTORY_FLOOR_SCALES))
    if guide is not None:
        assert w.starts is not None and w.widths is not None
        empty = guide_expects_empty(w.starts, guide, w.widths, w.depth, w.depths, w.prefixes)
    else:
        empty = self_empty(w.depths, w.prefixes, w.counts, w.epsilon, w.max_depth)
    w.floored = floored_counts(w.counts, empty, w.epsilon, w.floor_scales / w.epsilon)


#: Each summary (a time node when it completes, a block when it closes), in this order.
SUMMARY_STAGES: tuple[Stage[SummaryWork], ...] = (
    Stage("partition", _partition, POST_PROCESSING + ": a function of released summaries",
          "P16", "leaves where the guides saw records; no structure budget",
          switchable=False),
    Stage("refinement", _refinement, "budget share ε_s = ½ε of the summary's ε, from ε ≥ 32 "
          "(P10's PrivTree loss); off: the whole ε on the counts", "P16",
          "records fresh to the guides located at large ε (consistency)"),
    Stage("counts", _counts, "budget: the summary's ε (ε_l of a node, ε_top of a block), "
          "less ε_s", "P16", "the measurement", switchable=False),
    Stage("node_reuse", _node_reuse, POST_PROCESSING, "P16",
          "a node's or a block's counts and its children's, combined by least squares"),
    Stage("floors", _floors, POST_PROCESSING, "P16",
          "less phantom mass where the guide expects no record"),
)


# -- one closed block, as releases and the history guide read it -------------------------------

@dataclass
class ClosedWork:
    """A closed block's summary as it will be read."""

    summary: Summary


def _local_mass(w: ClosedWork) -> None:
    """The dropped leaves' noisy counts go to the kept leaves of their nearest ancestor that
    holds one (:mod:`.local_mass`)."""
    w.summary = locally_placed(w.summary)


#: Each closed block, when a release or the history guide reads it at a depth (cached).
CLOSED_BLOCK_STAGES: tuple[Stage[ClosedWork], ...] = (
    Stage("local_mass", _local_mass, POST_PROCESSING, "P16",
          "thin regions keep their mass, phantoms lose some", min_d=2),
)


# -- one release --------------------------------------------------------------------------

@dataclass
class ReleaseWork:
    """A release: the released summaries read by the mechanism at ``depth`` (the closed blocks
    stacked, the open block's cover and its scale to the open block's size estimate) and what
    rounds a density to the release's points."""

    depth: int
    d: int
    closed: StackedParts | None
    parts: list[tuple[np.ndarray, np.ndarray]]
    scale: float
    rounded: Callable[[np.ndarray, np.ndarray, np.ndarray, int], LeafCounts]
    pooled: Pooled | None = None
    starts: np.ndarray | None = None
    density: np.ndarray | None = None
    counts: LeafCounts | None = None


def _sum(w: ReleaseWork) -> None:
    """The closed blocks and the cover (scaled) summed on one grid (:mod:`.em`)."""
    w.pooled = pooled_parts(w.parts, w.depth, w.closed, w.scale)
    w.starts, w.density = w.pooled.grid, w.pooled.pooled


def _em(w: ReleaseWork) -> None:
    """Every part's mass spread inside its leaves like the sum, twice (:data:`.em.EM_STEPS`)."""
    assert w.pooled is not None
    w.starts, w.density = em_steps(w.pooled)


def _tilt(w: ReleaseWork) -> None:
    """A coarse cell between a sparser and a denser face neighbour leans toward the denser one
    (:mod:`.tilt`)."""
    assert w.starts is not None and w.density is not None
    w.starts, w.density = tilted_density(w.starts, w.density, w.depth, w.d)


def _rounding(w: ReleaseWork) -> None:
    """Systematic rounding to the release's points (:func:`~dpsynth.online.rounding.round_density`,
    the public placement seed)."""
    assert w.starts is not None and w.density is not None
    widths = np.diff(np.concatenate([w.starts, [1 << w.depth]]))
    w.counts = w.rounded(w.starts, widths, w.density, w.depth)


#: Each release, in this order.
RELEASE_STAGES: tuple[Stage[ReleaseWork], ...] = (
    Stage("sum", _sum, POST_PROCESSING + " of summaries and of sizes released at ε_n", "P16",
          "one density from every summary a release covers", switchable=False),
    Stage("em", _em, POST_PROCESSING, "P16",
          "fine structure seen by one summary sharpens the others' coarse leaves"),
    Stage("tilt", _tilt, POST_PROCESSING, "P16",
          "records across a cell edge from a dense region no longer sit at the cell's centre"),
    Stage("rounding", _rounding, POST_PROCESSING, "P6", "the release's points",
          switchable=False),
)

#: Every stage, by name.
_ALL: tuple[Stage[Any], ...] = (*SUMMARY_STAGES, *CLOSED_BLOCK_STAGES, *RELEASE_STAGES)
STAGES: dict[str, Stage[Any]] = {s.name: s for s in _ALL}


def switchable_stages() -> tuple[str, ...]:
    """The names a benchmark may switch off (module docstring)."""
    return tuple(name for name, stage in STAGES.items() if stage.switchable)


def checked_disabled(names: Iterable[str]) -> frozenset[str]:
    """``names`` as a set, each a switchable stage (else :class:`ConfigError`)."""
    out = frozenset(names)
    wrong = sorted(out - set(switchable_stages()))
    if wrong:
        raise ConfigError(f"stages {wrong} cannot be switched off; the switchable stages "
                          f"(benchmarks only) are {list(switchable_stages())}")
    return out


def enabled(stages: tuple[Stage[W], ...], disabled: frozenset[str], d: int
            ) -> tuple[Stage[W], ...]:
    """The stages of ``stages`` that run: not ``disabled``, and meant for dimension ``d``."""
    return tuple(s for s in stages if s.name not in disabled and d >= s.min_d)


def run(stages: tuple[Stage[W], ...], work: W) -> W:
    """Run ``stages`` in order on ``work``; return it."""
    for stage in stages:
        stage.run(work)
    return work
