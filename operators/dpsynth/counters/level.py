"""All cells of one tree level as one vectorised Inhomogeneous Sparse Counter.

Layer: core. Struct-of-arrays form of :class:`~dpsynth.counters.inhomogeneous.
InhomogeneousSparseCounter` (HVZ Alg 3 = diss. Alg 11, with Alg 2 and the Binary Mechanism
inside): cell c uses exactly the noise addresses of a scalar counter with ``stream=c`` and the
same context, so the two forms release identical values (tested). Per tick only the touched cells
and the cells whose stored firing check time has come do any work; the rest cost nothing
(docs/design.md D4). Every cell draws its level-end noise, touched or not, so the set of draws never
depends on the data.

Per-cell state, 8 int64 = 64 bytes: S̃, the exact total of closed segments, the open count N,
the segment index, the noisy threshold ⌊T0⌋ + λ_j, the next candidate check time and its window
W (see :mod:`dpsynth.counters.sparse`, "Lazy evaluation") and the summed Binary Mechanism node
noise of the current segment index. Binary Mechanism node noise is
recomputed from its address when a segment closes, never stored per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final, TypedDict

import numpy as np
from numpy.typing import NDArray

from dpsynth._types import CellIds, Counts
from dpsynth.clock import MAX_LEVEL, TickClock
from dpsynth.counters.binary import binary_levels, node_noise
from dpsynth.counters.inhomogeneous import level_context, level_end_scale
from dpsynth.counters.sparse import (
    _RESUME_SLOT,
    MAX_CLOSURES_PER_CHECK,
    NEVER,
    check_event,
    fire_probability,
    sparse_threshold,
    window_top,
)
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise


class LevelState(TypedDict):
    """The state of a :class:`LevelCounters` (:meth:`LevelCounters.state`): per-cell arrays,
    level and tick; no noise and no key."""

    noisy_total: Counts
    closed_total: Counts
    open_count: Counts
    segment: Counts
    noisy_threshold: Counts
    fire_at: Counts
    window_top: Counts
    bm_noise: Counts
    n_cells: int
    level: int
    tick: int
    frozen: Counts | None


class LevelCounters:
    """Inhomogeneous Sparse Counters of ``n_cells`` cells, advanced together once per tick.

    Privacy: per cell exactly as :class:`InhomogeneousSparseCounter` (ε_r per time level r);
    a replaced record changes the inputs of two cells per tree level (accounted in
    :mod:`dpsynth.accounting`).

    Parameters
    ----------
    n_cells
        Number of cells of this tree level (2^j).
    level_epsilon
        r ↦ ε_{j,r}.
    start_level
        r0 (= j for d ≥ 2): the counters are created at the first tick of this time level.
    clock, noise, context
        As for the scalar counter; cell c is stream c.

    Examples
    --------
    >>> clock = TickClock(epsilon=1.0, release_every=4)
    >>> level = LevelCounters(4, lambda r: 0.2, 2, clock, KeyedNoise(bytes(32)), ("doc",))
    >>> level.update(np.array([1, 3]), np.array([2, 1]))
    >>> level.values().shape, level.values().dtype.name, level.tick
    ((4,), 'int64', 1)
    """

    def __init__(
        self,
        n_cells: int,
        level_epsilon: Callable[[int], float],
        start_level: int,
        clock: TickClock,
        noise: KeyedNoise,
        context: Sequence[int | str],
        *,
        history: Sequence[Counts] | None = None,
    ) -> None:
        if n_cells < 1:
            raise ConfigError(f"n_cells ({n_cells}) must be >= 1")
        self.n_cells = int(n_cells)
        self.level_epsilon = level_epsilon
        self.clock = clock
        self._noise = noise
        self._context = tuple(context)
        # cell ids are int64 everywhere: numpy mixes uint64 with int64 into float64
        self._cells = np.arange(self.n_cells, dtype=np.int64)
        shape = (self.n_cells,)
        self.noisy_total = np.zeros(shape, np.int64)  # S̃
        self.closed_total = np.zeros(shape, np.int64)  # exact sum of closed segments
        self.open_count = np.zeros(shape, np.int64)  # N_j
        self.segment = np.zeros(shape, np.int64)
        self.noisy_threshold = np.zeros(shape, np.int64)  # ⌊T0⌋ + λ_j
        self.fire_at = np.full(shape, NEVER, np.int64)  # next candidate check time
        self.window_top = np.zeros(shape, np.int64)  # W of the candidate process
        self.bm_noise = np.zeros(shape, np.int64)
        self._frozen: Counts | None = None  # outputs of a level's last tick (S̃ moved on)
        self._due: dict[int, list[np.ndarray]] = {}
        self.level = start_level - 1
        if history is not None:
            self._replay(history, start_level)
        self._start_level(self._next_nonempty(start_level))

    def _replay(self, history: Sequence[Counts], start_level: int) -> None:
        """History replay for r0 = 0 (d = 1, docs/algorithms.md C.2): S̃ = Σ_{i<start} (count_i +
        Lap_Z(2/ε_i)).

        Each past level's noise is drawn at the address a counter running since level 0 would
        have used for its level-end update, so replay and running agree draw for draw. The
        level's Sparse Counter outputs were never released, so skipping them is free (C.2).
        """
        if len(history) != start_level:
            raise ValueError(f"history must hold one count vector per level 0..{start_level - 1}")
        for r, counts in enumerate(history):
            counts = np.asarray(counts, dtype=np.int64)
            if counts.shape != (self.n_cells,):
                raise ValueError(f"history[{r}] must hold {self.n_cells} counts")
            if self.clock.ticks_in_level(r) == 0:
                if counts.any():
                    raise ValueError(f"time level {r} is empty but history[{r}] is not")
                continue  # C.1: empty level, no noise
            end_noise = self._noise.discrete_laplace_at(
                level_end_scale(self.level_epsilon(r)),
                (*level_context(self._context, r), "end"),
                self._cells,
                0,
            )
            self.noisy_total += counts + end_noise  # privacy: P5

    # -- levels --------------------------------------------------------------------------

    def _next_nonempty(self, r: int) -> int:
        while self.clock.ticks_in_level(r) == 0 and r < MAX_LEVEL:
            r += 1  # C.1: empty level, no counter and no noise
        return r

    def _set_level_parameters(self, r: int) -> None:
        """Public, data-independent parameters of time level r (docs/algorithms.md A.5.3 table)."""
        eps_r = self.level_epsilon(r)
        if not eps_r > 0:
            raise ConfigError(f"level epsilon at time level r={r} ({eps_r}) must be > 0")
        self.level = r
        self.horizon = self.clock.ticks_in_level(r)  # T_r
        sparse_epsilon = eps_r / 2
        self.scale = 2.0 / sparse_epsilon  # threshold and check noise
        self.threshold = sparse_threshold(sparse_epsilon, self.horizon)  # T0
        self.bm_levels = binary_levels(self.horizon)
        self.bm_scale = self.bm_levels / (sparse_epsilon / 2)
        self._level_ctx = level_context(self._context, r)

    def _start_level(self, r: int) -> None:
        self._set_level_parameters(r)
        self.tick = 0
        self.closed_total[:] = 0
        self.open_count[:] = 0
        self.segment[:] = 0
        self.bm_noise[:] = 0
        self._due = {}
        self.noisy_threshold[:] = self._draw_thresholds(self._cells)
        self._schedule(self._cells, 0, np.zeros(self.n_cells, np.int64))

    def _end_level(self) -> None:
        eps_r = self.level_epsilon(self.level)
        end_noise = self._noise.discrete_laplace_at(
            level_end_scale(eps_r), (*self._level_ctx, "end"), self._cells, 0
        )
        self._frozen = self.values()
        self.noisy_total += self.closed_total + self.open_count + end_noise  # privacy: P5
        self._start_level(self._next_nonempty(self.level + 1))

    # -- noise ---------------------------------------------------------------------------

    def _draw_thresholds(self, cells: np.ndarray) -> Counts:
        lam = self._noise.discrete_laplace_at(
            self.scale, (*self._level_ctx, "thr"), cells, self.segment[cells].astype(np.uint64)
        )
        return math.floor(self.threshold) + lam

    def _schedule(
        self,
        cells: np.ndarray,
        time: int,
        closures: np.ndarray,
        event: np.ndarray | None = None,
        purpose: str = "fire",
    ) -> None:
        """New window from the current counts; first candidate check time ≥ ``time`` per cell."""
        if cells.size == 0:
            return
        thr = self.noisy_threshold[cells]
        self.window_top[cells] = window_top(self.open_count[cells], thr, self.scale)
        q_window = fire_probability(self.scale, thr, self.window_top[cells])
        events = check_event(time, closures) if event is None else event
        gap = self._noise.geometric_at(
            q_window, (*self._level_ctx, purpose), cells.astype(np.uint64),
            events.astype(np.uint64),
        )
        fire = time + np.minimum(gap, self.horizon)
        alive = (fire < self.horizon) & (self.segment[cells] < self.horizon)
        self.fire_at[cells] = np.where(alive, fire, NEVER)
        self._index_due(cells[alive], fire[alive])

    def _index_due(self, cells: np.ndarray, when: np.ndarray) -> None:
        """Add cells to the due-check index under their candidate times (one sort, no scans)."""
        if cells.size == 0:
            return
        order = np.argsort(when, kind="stable")
        cells, when = cells[order], when[order]
        starts = np.flatnonzero(np.r_[True, when[1:] != when[:-1]])
        for group, start in zip(np.split(cells, starts[1:]), starts, strict=True):
            self._due.setdefault(int(when[start]), []).append(group)

    def _accept(self, cells: CellIds, time: int, closures: Counts) -> NDArray[np.bool_]:
        """Thinning: the candidate at ``time`` fires with probability q(N)/q(W); rejected cells
        draw their next candidate from time + 1."""
        thr = self.noisy_threshold[cells]
        q_now = fire_probability(self.scale, thr, self.open_count[cells])
        q_window = fire_probability(self.scale, thr, self.window_top[cells])
        events = check_event(time, closures)
        u = self._noise.uniform_at(
            (*self._level_ctx, "accept"), cells.astype(np.uint64), events.astype(np.uint64)
        )
        accept: NDArray[np.bool_] = u * q_window <= q_now
        rejected = cells[~accept]
        self._schedule(rejected, time + 1, closures[~accept], events[~accept], "refire")
        return accept

    # -- checks and ticks ----------------------------------------------------------------

    def _close(self, cells: np.ndarray) -> None:
        """Close the open segment of ``cells``: feed N to the Binary Mechanism, new threshold."""
        self.closed_total[cells] += self.open_count[cells]
        self.open_count[cells] = 0
        self.segment[cells] += 1
        self.bm_noise[cells] = node_noise(
            self._noise,
            self.bm_scale,
            (*self._level_ctx, "bm"),
            cells.astype(np.uint64),
            self.segment[cells],
            self.bm_levels,
        )
        self.noisy_threshold[cells] = self._draw_thresholds(cells)

    def _run_checks(self, time: int) -> None:
        pending = self._due.pop(time, None)
        if not pending:
            return
        cells = np.unique(np.concatenate(pending))
        cells = cells[self.fire_at[cells] == time]  # drop stale entries
        closures = np.zeros(cells.size, np.int64)
        while cells.size:
            accept = self._accept(cells, time, closures)
            cells, closures = cells[accept], closures[accept]
            if not cells.size:
                break
            self._close(cells)
            closures += 1
            self._schedule(cells, time, closures)
            again = self.fire_at[cells] == time
            self._due.pop(time, None)
            capped = again & (closures >= MAX_CLOSURES_PER_CHECK)
            if capped.any():  # cap reached: go on testing from time + 1
                stuck = cells[capped]
                self._schedule(
                    stuck,
                    time + 1,
                    np.zeros(stuck.size, np.int64),
                    np.full(stuck.size, check_event(time, _RESUME_SLOT)),
                )
            keep = again & ~capped
            cells, closures = cells[keep], closures[keep]

    def update(self, cells: CellIds | np.ndarray, counts: Counts | np.ndarray) -> None:
        """Advance one tick; ``counts[i]`` records fell in cell ``cells[i]`` (cells unique).

        Cells not listed received 0. Only listed cells and cells whose stored firing check time
        has come do any work.
        """
        cells = np.asarray(cells, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        if cells.shape != counts.shape:
            raise ValueError("cells and counts must have the same shape")
        if counts.size and counts.min() < 0:
            raise ValueError("increments must be non-negative")
        self._frozen = None
        self._run_checks(self.tick)  # the test at τ = tick − 1 runs before this tick's input
        self.tick += 1
        touched = cells[counts != 0]
        if touched.size:
            self.open_count[touched] += counts[counts != 0]
            left = touched[self.open_count[touched] > self.window_top[touched]]
            self._schedule(left, self.tick, np.zeros(left.size, np.int64))
        if self.tick == self.horizon:
            self._end_level()

    def update_dense(self, increments: Counts | np.ndarray) -> None:
        """:meth:`update` from a dense vector of per-cell increments."""
        increments = np.asarray(increments, dtype=np.int64)
        cells = np.flatnonzero(increments)
        self.update(cells, increments[cells])

    def values(self) -> Counts:
        """N_t = S̃ + c_t of every cell after the last tick (noisy; may be negative)."""
        if self._frozen is not None:
            return self._frozen.copy()
        return self.noisy_total + self.closed_total + self.bm_noise

    _ARRAYS: Final = (
        "noisy_total", "closed_total", "open_count", "segment", "noisy_threshold", "fire_at",
        "window_top", "bm_noise",
    )

    def state(self) -> LevelState:
        """Everything needed to continue exactly: per-cell arrays, level and tick (no noise)."""
        return LevelState(  # the keys in the order of _ARRAYS, then the scalars (same bytes)
            noisy_total=self.noisy_total.copy(), closed_total=self.closed_total.copy(),
            open_count=self.open_count.copy(), segment=self.segment.copy(),
            noisy_threshold=self.noisy_threshold.copy(), fire_at=self.fire_at.copy(),
            window_top=self.window_top.copy(), bm_noise=self.bm_noise.copy(),
            n_cells=self.n_cells, level=self.level, tick=self.tick,
            frozen=None if self._frozen is None else self._frozen.copy(),
        )

    @classmethod
    def from_state(
        cls,
        state: LevelState,
        level_epsilon: Callable[[int], float],
        clock: TickClock,
        noise: KeyedNoise,
        context: Sequence[int | str],
    ) -> LevelCounters:
        """Rebuild from :meth:`state` without drawing any noise; the due-check index is derived
        from the stored firing times."""
        self = cls.__new__(cls)
        self.n_cells = int(state["n_cells"])
        self.level_epsilon = level_epsilon
        self.clock = clock
        self._noise = noise
        self._context = tuple(context)
        self._cells = np.arange(self.n_cells, dtype=np.int64)
        self._set_level_parameters(int(state["level"]))
        self.tick = int(state["tick"])
        for name in cls._ARRAYS:
            array = np.asarray(state[name], dtype=np.int64)
            if array.shape != (self.n_cells,):
                raise ValueError(f"state array {name} has the wrong shape")
            setattr(self, name, array.copy())
        frozen = state.get("frozen")
        self._frozen = None if frozen is None else np.asarray(frozen, dtype=np.int64).copy()
        self._due = {}
        alive = np.flatnonzero(self.fire_at != NEVER)
        self._index_due(alive, self.fire_at[alive])
        return self

    @property
    def nbytes(self) -> int:
        """Bytes of per-cell state (excluding the due-check index)."""
        arrays = (
            self.noisy_total, self.closed_total, self.open_count, self.segment,
            self.noisy_threshold, self.fire_at, self.window_top, self.bm_noise,
        )
        return sum(a.nbytes for a in arrays)
