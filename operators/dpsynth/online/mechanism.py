"""The protocol between the online synthesizer and its algorithms, and the factory.

Layer: core. The synthesizer owns time (records, ticks, public steps), validation, releases and
snapshots; a *mechanism* owns the private state of one algorithm and answers through
:class:`Mechanism`. Three implement it, each the best at some documented setting or the
paper's reproduction (docs/benchmarks.md, "Accuracy by mechanism"):

``guided``
    doubling blocks of public steps with octal time nodes and partitions chosen from released
    summaries (:class:`~dpsynth.online.guided.GuidedMechanism`): ``auto`` below a per-record ε
    of 10³;
``adaptive``
    the same blocks summarised by PrivTree histograms
    (:class:`~dpsynth.online.blocks.AdaptiveMechanism`): ``auto`` from 10³ on;
``paper``
    HVZ Alg 1 verbatim (:class:`~dpsynth.online.paper.PaperMechanism`), any
    :class:`~dpsynth.accounting.Schedule`, up to a per-record ε of :data:`PAPER_MAX_EPSILON`.

``accurate`` (per-level GLS) and ``blocks`` (PMM block summaries) were retired: on the drift
and concentrated panels neither was the best at any setting (docs/decisions/0002).

Only this module knows which is which (its registry); ``"auto"`` resolves in
:func:`resolve_mechanism`. The arguments are checked once, before any of this runs, by
:meth:`OnlineConfig.resolve <dpsynth.online.config.OnlineConfig.resolve>`; a builder reads the
resolved configuration unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dpsynth._types import CellIds, LeafCounts
from dpsynth.accounting import Schedule, paper_schedule
from dpsynth.clock import TickClock
from dpsynth.noise import KeyedNoise
from dpsynth.online.block_budget import NEIGHBOUR_NOTIONS
from dpsynth.online.blocks import AdaptiveMechanism
from dpsynth.online.guided import GuidedMechanism
from dpsynth.online.paper import PaperMechanism

#: ``mechanism="auto"``: the measured winner (docs/decisions/0001; docs/benchmarks.md, "Accuracy by
#: mechanism"), under both notions and for every d — guided below a per-record ε of
#: :data:`AUTO_ADAPTIVE_FROM` (adaptive's open block, seen one step at a time, stops improving
#: with t on drifting streams), adaptive from it on
#: (both reach offline PMM's error there — guided since its summaries pay for PrivTree
#: refinement from a summary ε of 32 — and adaptive runs faster at d = 1).
AUTO = "auto"
#: The per-record ε from which ``auto`` is adaptive (public: the configuration decides it).
AUTO_ADAPTIVE_FROM = 1000.0

__all__ = ["AUTO", "MECHANISMS", "NEIGHBOUR_NOTIONS", "PAPER_MAX_EPSILON", "BuildConfig", "Builder",
           "Mechanism", "make_mechanism", "resolve_mechanism", "step_mechanisms", "takes_steps"]


class Mechanism(Protocol):
    """One online algorithm's private state, as the synthesizer drives it.

    Attributes: ``name`` and ``params`` (release metadata ``schedule`` and
    ``schedule_params``), ``worst_case_loss`` (checked ≤ ε at construction), and
    ``counts_records`` (True when time levels are record counts, which are public only under
    replacement: such mechanisms refuse add/remove and reject explicit steps).
    """

    name: str
    params: dict[str, Any]
    worst_case_loss: float
    counts_records: bool

    def tick_limit(self, t: int) -> int:
        """The record count at which the open tick must end whatever the release period."""

    def add(self, addresses: CellIds) -> None:
        """Records of the open tick (Morton addresses at ``max_depth``)."""

    def end_tick(self, t: int) -> None:
        """Close the open tick, ``t`` records in all."""

    def release_counts(self, t: int, placement_seed: bytes) -> LeafCounts:
        """The released size, depth and leaf counts (summing to the size) of a release now."""

    def depth(self, t: int) -> int | None:
        """The depth of a release at ``t`` if it is a function of t, else None (the last one)."""

    def extra_metadata(self) -> dict[str, Any]:
        """Public metadata particular to the mechanism (e.g. the step count)."""

    @property
    def n_cells(self) -> int:
        """Cells (or leaves) held."""

    @property
    def nbytes(self) -> int:
        """Bytes of per-cell state."""

    def state(self) -> dict[str, Any]:
        """Snapshot entries (no key material)."""

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""


class BuildConfig(Protocol):
    """What a builder reads of the resolved configuration
    (:class:`~dpsynth.online.config.OnlineConfig` has these fields): a protocol, so this module,
    which the configuration imports to resolve ``auto``, imports nothing of it back."""

    @property
    def d(self) -> int: ...
    @property
    def mechanism(self) -> str: ...
    @property
    def record_epsilon(self) -> float: ...
    @property
    def neighbours(self) -> str: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def current_shape(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def schedule(self) -> Schedule | None: ...


def resolve_mechanism(mechanism: str, d: int, neighbours: str, epsilon: float = 1.0) -> str:
    """The concrete mechanism of ``"auto"`` at per-record ``epsilon`` (:data:`AUTO`); any other
    value unchanged."""
    if mechanism != AUTO:
        return mechanism
    return "adaptive" if epsilon >= AUTO_ADAPTIVE_FROM else "guided"


#: ``paper`` above this per-record ε: refused (HVZ Alg 1 opens a level of 2^j cells at every
#: t_j = ⌈2^j/ε⌉, so at larger ε its cells, and its work per record, run to the tree's depth;
#: below it, its speed is in docs/benchmarks.md, "Paper mode"; docs/decisions/0002).
PAPER_MAX_EPSILON = 10.0


#: A mechanism's builder: the resolved configuration (checked: nothing is checked again),
#: the run's keyed noise, the synthesizer's clock; the noise context starts
#: ("dpsynth", "partition", p) and the builder appends its own.
Builder = Callable[[BuildConfig, KeyedNoise, TickClock], Mechanism]


def _context(c: BuildConfig) -> tuple[int | str, ...]:
    return ("dpsynth", "partition", c.partition)


def _guided(c: BuildConfig, noise: KeyedNoise, clock: TickClock) -> Mechanism:
    budget = GuidedMechanism.budget_for(c.record_epsilon, c.neighbours)  # privacy: P16
    return GuidedMechanism(c.d, budget, noise, (*_context(c), "guided"), c.max_depth)


def _adaptive(c: BuildConfig, noise: KeyedNoise, clock: TickClock) -> Mechanism:
    budget = AdaptiveMechanism.budget_for(c.record_epsilon, c.neighbours,
                                          c.current_shape)  # privacy: P9
    return AdaptiveMechanism(c.d, budget, noise, (*_context(c), "adaptive"), c.max_depth,
                             c.current_shape)


def _paper(c: BuildConfig, noise: KeyedNoise, clock: TickClock) -> Mechanism:
    # the per-record ε (≤ PAPER_MAX_EPSILON) and a given schedule's d and ε: OnlineConfig
    schedule = c.schedule if c.schedule is not None else paper_schedule(c.d, c.record_epsilon)
    return PaperMechanism(c.d, schedule, clock, noise, (*_context(c), "cells"), c.max_depth)


@dataclass(frozen=True)
class _Entry:
    build: Builder
    steps: bool  # time is public steps (any notion); else record counts (replacement only)


#: Every shipped mechanism, in the order of the documentation: the only place that knows them.
_REGISTRY: dict[str, _Entry] = {
    "guided": _Entry(_guided, steps=True),
    "adaptive": _Entry(_adaptive, steps=True),
    "paper": _Entry(_paper, steps=False),
}
#: Every algorithm's name (the release metadata calls it ``schedule``).
MECHANISMS = tuple(_REGISTRY)


def step_mechanisms() -> tuple[str, ...]:
    """The mechanisms whose time is public steps: the only ones for add/remove."""
    return tuple(name for name, entry in _REGISTRY.items() if entry.steps)


def takes_steps(mechanism: str) -> bool:
    """True when ``mechanism`` (``"auto"`` included) counts time in public steps."""
    return mechanism == AUTO or _REGISTRY[mechanism].steps


def make_mechanism(config: BuildConfig, noise: KeyedNoise, clock: TickClock) -> Mechanism:
    """Build the configuration's mechanism, its budget checked (raises before anything is
    counted). ``config`` comes from :meth:`OnlineConfig.resolve
    <dpsynth.online.config.OnlineConfig.resolve>`, which checked every argument and
    combination; the builder reads it unchanged (``paper``'s ε allocation: ``config.schedule``,
    default HVZ eq. (5.3) for d ≥ 2, (5.12) for d = 1).
    """
    return _REGISTRY[config.mechanism].build(config, noise, clock)
