"""HVZ Alg 1 verbatim as a mechanism: Inhomogeneous Sparse Counting in every cell of every level.

Layer: core. Reading of docs/algorithms.md C.0: time levels t_j = ⌈2^j/ε⌉; the cells of depth j ≥ 1
exist from t_j on (the prose and proofs, not the printed loop, C.1); each tree level is one
:class:`~dpsynth.counters.LevelCounters` running Inhomogeneous Sparse Counting (HVZ Alg 3 = diss.
Alg 11) with the schedule ε_{j,r} of :mod:`dpsynth.accounting`; for d ≥ 2 a level-j cell starts
at time level j and never sees earlier data, for d = 1 it replays the history of all completed
time levels (C.2); the root count is t (C.3); at each release the noisy counts of levels
1..depth(t) are made consistent top-down (:mod:`dpsynth.consistency`, C.7).

Privacy: ε-DP under replacement of one record (two root-to-leaf paths, ε/2 each), checked by
:func:`dpsynth.accounting.check_budget` at construction (privacy: P1); releases are functions of
the noisy counts and of public parameters (privacy: P6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpsynth._types import CellIds, Counts, LeafCounts
from dpsynth.accounting import Schedule, check_budget
from dpsynth.clock import TickClock, level_of, level_start
from dpsynth.consistency import make_consistent
from dpsynth.counters.level import LevelCounters
from dpsynth.noise import KeyedNoise


class PaperMechanism:
    """The cells of levels 1..max_depth as LevelCounters, advanced per tick (module docstring)."""

    counts_records = True  # time levels are record counts: replacement neighbours only

    def __init__(self, d: int, schedule: Schedule, clock: TickClock, noise: KeyedNoise,
                 context: tuple[int | str, ...], max_depth: int) -> None:
        self.d = d
        self.schedule = schedule
        self.name = schedule.name
        self.params = dict(schedule.params)
        self.worst_case_loss = check_budget(schedule)  # privacy: P1
        self.clock = clock
        self.max_depth = max_depth
        self._noise = noise
        self._context = context
        self.levels: list[LevelCounters] = []  # levels[j-1] holds tree level j
        self._pending: list[CellIds] = []  # addresses of the open tick
        self._history: list[list[CellIds]] = []  # d = 1: addresses per time level
        self._grow(0)

    # -- structure ------------------------------------------------------------------------

    def _level_epsilon(self, j: int) -> Callable[[int], float]:
        schedule = self.schedule
        return lambda r: schedule.level_epsilon(j, r)

    def _grow(self, t: int) -> None:
        """Create every tree level j with t_j ≤ t + 1 (cells of depth j exist from t_j, C.1)."""
        while len(self.levels) < self.max_depth:
            j = len(self.levels) + 1
            if level_start(j, self.clock.epsilon) > t + 1:  # privacy: P6 (C.1)
                return
            history = None
            if self.d == 1:  # r0 = 0: replay every completed time level (C.2)
                history = [self._history_counts(r, j) for r in range(j)]
            self.levels.append(LevelCounters(
                1 << j, self._level_epsilon(j), j, self.clock, self._noise,
                (*self._context, j), history=history,
            ))

    def _history_counts(self, r: int, j: int) -> Counts:
        chunks = self._history[r] if r < len(self._history) else []
        if not chunks:
            return np.zeros(1 << j, np.int64)
        cells = np.concatenate(chunks) >> np.uint64(self.max_depth - j)
        return np.bincount(cells.astype(np.int64), minlength=1 << j).astype(np.int64)

    def tick_limit(self, t: int) -> int:
        """The record count at which the open tick must end: the end of t's time level."""
        return level_start(level_of(t + 1, self.clock.epsilon) + 1, self.clock.epsilon) - 1

    def depth(self, t: int) -> int:
        """depth(t) = min(level(t), max_depth), 0 before t_0 (C.0): a function of t only."""
        return max(min(level_of(t, self.clock.epsilon), self.max_depth), 0) if t else 0

    # -- ticks ------------------------------------------------------------------------------

    def add(self, addresses: CellIds) -> None:
        """Records of the open tick (Morton addresses at ``max_depth``)."""
        self._pending.append(addresses)

    def end_tick(self, t: int) -> None:
        """Close the tick that ends at record count ``t``: one update of every level."""
        tick = np.sort(np.concatenate(self._pending)) if self._pending else np.zeros(0, np.uint64)
        self._pending = []
        for j, level in enumerate(self.levels, start=1):
            cells = tick >> np.uint64(self.max_depth - j)
            if cells.size:
                starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
                counts = np.diff(np.r_[starts, cells.size])
                level.update(cells[starts].astype(np.int64), counts)
            else:
                level.update(np.zeros(0, np.int64), np.zeros(0, np.int64))
        if self.d == 1:
            r = level_of(t, self.clock.epsilon)  # one tick lies in one time level
            if r >= 0:  # data before t_0 is never counted (C.2)
                while len(self._history) <= r:
                    self._history.append([])
                self._history[r].append(tick)
        self._grow(t)

    def release_counts(self, t: int, placement_seed: bytes) -> LeafCounts:
        """t, depth(t) and consistent leaf counts: post-processing of the noisy counts (P6)."""
        depth = self.depth(t)
        noisy = [self.levels[j - 1].values() for j in range(1, depth + 1)]
        consistent = make_consistent(t, noisy)
        return LeafCounts(t, depth, consistent[-1] if consistent else np.array([t], np.int64))

    def extra_metadata(self) -> dict[str, Any]:
        """Nothing beyond the common metadata."""
        return {}

    # -- sizes and state ---------------------------------------------------------------------

    @property
    def n_cells(self) -> int:
        """Cells created so far, over all depths."""
        return sum(1 << j for j in range(1, len(self.levels) + 1))

    @property
    def nbytes(self) -> int:
        """Bytes of per-cell counter state (excluding the open tick and d = 1 history)."""
        return sum(level.nbytes for level in self.levels)

    def state(self) -> dict[str, Any]:
        """Snapshot entries: the open tick, the d = 1 history and every level's counters."""
        return {
            "pending": (np.concatenate(self._pending) if self._pending
                        else np.zeros(0, np.uint64)),
            "history": [np.concatenate(c) if c else np.zeros(0, np.uint64)
                        for c in self._history],
            "levels": [level.state() for level in self.levels],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        pending = state["pending"]
        self._pending = [pending] if pending.size else []
        self._history = [[h] if h.size else [] for h in state["history"]]
        self.levels = [
            LevelCounters.from_state(level_state, self._level_epsilon(j), self.clock,
                                     self._noise, (*self._context, j))
            for j, level_state in enumerate(state["levels"], start=1)
        ]
