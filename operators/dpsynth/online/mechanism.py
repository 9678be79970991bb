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
:func:`resolve_mechanism`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dpsynth._types import CellIds, LeafCounts
from dpsynth.accounting import Schedule, paper_schedule, record_epsilon
from dpsynth.clock import TickClock
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.online.block_budget import NEIGHBOUR_NOTIONS
from dpsynth.online.blocks import AdaptiveMechanism
from dpsynth.online.guided import GuidedMechanism
from dpsynth.online.paper import PaperMechanism
from dpsynth.params import check_library

#: ``mechanism="auto"``: the measured winner (docs/decisions/0001; docs/benchmarks.md, "Accuracy by
#: mechanism"), under both notions and for every d — guided below a per-record ε of
#: :data:`AUTO_ADAPTIVE_FROM` (adaptive's open block, seen one step at a time, stops improving
#: with t on drifting streams), adaptive from it on
#: (both reach offline PMM's error there — guided since its summaries pay for PrivTree
#: refinement from a summary ε of 32 — and adaptive runs faster at d = 1).
AUTO = "auto"
#: The per-record ε from which ``auto`` is adaptive (public: the configuration decides it).
AUTO_ADAPTIVE_FROM = 1000.0

__all__ = ["AUTO", "MECHANISMS", "NEIGHBOUR_NOTIONS", "PAPER_MAX_EPSILON", "Mechanism",
           "MechanismArgs",
           "check_arguments", "make_mechanism", "per_record_epsilon", "resolve_mechanism",
           "step_mechanisms", "takes_steps"]


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


def check_arguments(d: int, mechanism: str, schedule: Schedule | None, max_depth: int,
                    placement: str, neighbours: str, epsilon: float = 1.0) -> str:
    """Check the synthesizer's structural arguments; the concrete mechanism's name.

    A custom ε allocation (``schedule``) with ``mechanism="auto"`` runs HVZ Alg 1 (``paper``).
    """
    if not isinstance(d, int) or d < 1:
        raise ConfigError(f"d ({d!r}) must be an integer >= 1")
    if not isinstance(mechanism, str):
        raise ConfigError(f"mechanism ({mechanism!r}) must be a name; pass an ε allocation "
                          "as schedule=... with mechanism='paper'")
    if schedule is not None and not isinstance(schedule, Schedule):
        raise ConfigError(f"schedule ({schedule!r}) must be a dpsynth.accounting.Schedule; "
                          "the algorithm is chosen by mechanism=...")
    if schedule is not None and mechanism == AUTO:
        mechanism = "paper"  # a custom ε allocation runs HVZ Alg 1
    check_library({}, max_depth=max_depth, placement=placement, mechanism=mechanism)
    return resolve_mechanism(mechanism, d, neighbours, epsilon)


def per_record_epsilon(epsilon: Any, privacy_unit: str, max_contributions: Any) -> float:
    """The ε one record is protected at (ε/k for the unit "user"), for ``auto``'s choice only;
    0 when the arguments are invalid (they are rejected later, with their own messages)."""
    try:
        if privacy_unit == "user":
            return record_epsilon(epsilon, max_contributions)
        return float(epsilon)
    except (ConfigError, TypeError, ValueError):
        return 0.0


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


@dataclass(frozen=True)
class MechanismArgs:
    """What the factory gives a mechanism's builder (checked before it is called)."""

    d: int
    epsilon: float  # per record
    noise: KeyedNoise
    clock: TickClock
    context: tuple[int | str, ...]  # ("dpsynth", "partition", p): the builder appends its own
    max_depth: int
    neighbours: str
    schedule: Schedule | None
    current_shape: str


def _guided(a: MechanismArgs) -> Mechanism:
    budget = GuidedMechanism.budget_for(a.epsilon, a.neighbours)  # privacy: P16
    return GuidedMechanism(a.d, budget, a.noise, (*a.context, "guided"), a.max_depth)


def _adaptive(a: MechanismArgs) -> Mechanism:
    budget = AdaptiveMechanism.budget_for(a.epsilon, a.neighbours, a.current_shape)  # P9
    return AdaptiveMechanism(a.d, budget, a.noise, (*a.context, "adaptive"), a.max_depth,
                             a.current_shape)


def _paper(a: MechanismArgs) -> Mechanism:
    if a.epsilon > PAPER_MAX_EPSILON:
        raise ConfigError(
            f"mechanism='paper' runs up to a per-record ε of {PAPER_MAX_EPSILON:g} (here "
            f"{a.epsilon:g}): HVZ Alg 1 opens 2^j cells at t_j = 2^j/ε, so above it every record "
            "pays for cells down to the tree's depth; use mechanism='auto' (offline PMM's "
            "error at large ε), or a smaller ε to reproduce the paper")
    schedule = a.schedule
    if schedule is None:
        schedule = paper_schedule(a.d, a.epsilon)
    elif schedule.d != a.d or schedule.epsilon != float(a.epsilon):
        raise ConfigError(
            f"schedule '{schedule.name}' is for d={schedule.d}, epsilon={schedule.epsilon}; "
            f"build it with d={a.d}, epsilon={a.epsilon}"
        )
    return PaperMechanism(a.d, schedule, a.clock, a.noise, (*a.context, "cells"), a.max_depth)


@dataclass(frozen=True)
class _Entry:
    build: Callable[[MechanismArgs], Mechanism]
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


def make_mechanism(
    mechanism: str,
    *,
    d: int,
    epsilon: float,
    noise: KeyedNoise,
    clock: TickClock,
    partition: int,
    max_depth: int,
    neighbours: str,
    schedule: Schedule | None = None,
    current_shape: str = "steps",
) -> Mechanism:
    """Build the named mechanism, its budget checked (raises before anything is counted).

    ``schedule`` is the ε allocation of ``mechanism="paper"`` (default: HVZ eq. (5.3) for
    d ≥ 2, (5.12) for d = 1).
    """
    if neighbours not in NEIGHBOUR_NOTIONS:
        raise ConfigError(f"neighbours ({neighbours!r}) must be one of {NEIGHBOUR_NOTIONS}")
    if mechanism not in MECHANISMS:
        raise ConfigError(f"mechanism ({mechanism!r}) must be one of {(AUTO, *MECHANISMS)}")
    if neighbours == "add_remove" and not _REGISTRY[mechanism].steps:
        steps = step_mechanisms()
        raise ConfigError(
            f"neighbours='add_remove' needs mechanism={', '.join(map(repr, steps[:-1]))} or "
            f"{steps[-1]!r}: the time levels of the other mechanisms count records, and the "
            "record count is private under add/remove (docs/privacy.md P9)"
        )
    if schedule is not None and mechanism != "paper":
        raise ConfigError(f"schedule (an ε allocation) applies to mechanism='paper' only, not "
                          f"{mechanism!r}; drop it")
    return _REGISTRY[mechanism].build(MechanismArgs(
        d, epsilon, noise, clock, ("dpsynth", "partition", partition), max_depth, neighbours,
        schedule, current_shape))
