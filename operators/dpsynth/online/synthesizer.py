"""Online private synthetic data: HVZ Alg 1 (= dissertation Alg 12), on ticks.

Layer: core. Reading of spec C.0 (every choice marked there): time levels t_j = ⌈2^j/ε⌉; the
cells of depth j ≥ 1 exist from t_j on (the prose and proofs, not the printed loop, C.1); each
tree level is one :class:`~dpsynth.counters.LevelCounters` running Inhomogeneous Sparse Counting
(HVZ Alg 3) with the schedule ε_{j,r} of :mod:`dpsynth.accounting`; for d ≥ 2 a level-j cell
starts at time level j and never sees earlier data, for d = 1 it replays the history of all
completed time levels (C.2); the root count is t (C.3); at each release the noisy counts of
levels 1..depth(t) are made consistent top-down (:mod:`dpsynth.consistency`, C.7) and the leaf
counts are published with a public placement seed (:mod:`dpsynth.release.model`): exactly t points.

Ticks (DESIGN §3): counters advance at every ``release_every`` records and at every level end;
releases are made at multiples of ``release_every``. ``max_depth`` caps the tree (no cells below
it are ever created): privacy-neutral, it bounds memory; accuracy plateaus at the leaf diameter.

Privacy: ε-DP under replacement of one record (two root-to-leaf paths, ε/2 each), checked by
:func:`dpsynth.accounting.check_budget` at construction (privacy: P1). Everything released is a
function of the noisy counts and of public parameters (privacy: P6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth._types import Counts, Points
from dpsynth.accounting import Schedule, check_budget, paper_schedule
from dpsynth.clock import TickClock, level_of, level_start
from dpsynth.consistency import MAX_COUNT, make_consistent
from dpsynth.counters.level import LevelCounters
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.online.accurate import AccurateTree, accurate_schedule
from dpsynth.online.blocks import (
    BLOCK_SCHEDULES,
    LEAF_FLOOR_SCALES,
    NEIGHBOUR_NOTIONS,
    BlockEngine,
    block_budget,
)
from dpsynth.release import PLACEMENTS, RELEASE_SCHEMA_VERSION, Release
from dpsynth.state import pack_state, unpack_state
from dpsynth.tree import MAX_TREE_DEPTH, route, validate_points

SCHEDULES = ("paper", "accurate", *BLOCK_SCHEDULES)
#: ``schedule="auto"``: the measured winner (docs/benchmarks.md §12) — adaptive for d ≥ 2 and
#: under add/remove, accurate for d = 1 under replacement.
AUTO = "auto"


def resolve_schedule(schedule: str | Schedule, d: int, neighbours: str) -> str | Schedule:
    """The concrete schedule of ``"auto"``; any other value unchanged."""
    if schedule != AUTO:
        return schedule
    return "adaptive" if d >= 2 or neighbours == "add_remove" else "accurate"
DEFAULT_MAX_DEPTH = 20


class OnlineSynthesizer:
    """Continual ε-DP synthetic data over [0,1]^d: HVZ Alg 1 (= dissertation Alg 12).

    Privacy: ε-DP for the whole (infinite) sequence of releases under replacement of one record;
    the budget of every root-to-leaf path is checked at construction (P1); all noise is derived
    from ``key`` (P2), so the same key and input give byte-identical releases.

    Parameters
    ----------
    d
        Dimension of the points.
    epsilon
        Total privacy budget ε.
    key
        Secret noise key (≥ 16 bytes). Never stored in a snapshot or release.
    release_every
        N: a tick, and a release, every N records.
    schedule
        ``"auto"`` (default): ``"adaptive"`` for d ≥ 2 or under add/remove, else
        ``"accurate"`` — the winners of docs/benchmarks.md §12. ``"adaptive"``: PrivTree
        histograms of doubling blocks of steps (:mod:`~dpsynth.online.blocks`); ``"blocks"``:
        the same with PMM histograms; ``"accurate"``: :mod:`dpsynth.online.accurate` (issue 5);
        ``"paper"``: ε_{j,r} of HVZ eq. (4.1) for d ≥ 2 and (5.1) for d = 1 with Sparse
        Counting per cell (faithful reproduction, 4–12× less accurate); or a
        :class:`~dpsynth.accounting.Schedule` (snapshots then store only its name, so restore
        needs the same object: pass it again).
    max_depth
        Deepest tree level ever created (default 20).
    placement
        ``"uniform"`` (keyed, public positions inside leaves) or ``"centre"``.
    partition
        Input partition served; enters every noise context so partitions never share noise.
    fresh
        Accurate mode: share of each cell's budget for a Binary Mechanism over the current
        level's ticks, so releases move within a level (default 0: they move at level ends).
    alpha
        Accurate mode: depth ratio of the schedule (default 2^{(1−1/d)/2}).
    neighbours
        ``"replace"`` (default; the papers' notion, t public) or ``"add_remove"`` (one record
        more or less in one step; releases carry a noisy size). add/remove needs
        ``schedule="adaptive"`` or ``"blocks"`` and steps on a public clock: :meth:`add`
        the records, :meth:`step` at each tick; :meth:`extend` is refused (docs/privacy.md P9).
    current_shape
        Block schedules: the open block's records are placed like the latest completed block
        (``"last"``, default: follows drift) or like all completed blocks (``"pooled"``).

    Examples
    --------
    >>> synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=100)
    >>> releases = synth.extend(np.full((250, 2), 0.3))
    >>> [r.t for r in releases], synth.release().points.shape
    ([100, 200], (200, 2))
    >>> int(synth.release().leaf_counts.sum())
    200
    """

    def __init__(
        self,
        d: int,
        epsilon: float,
        key: bytes,
        release_every: int,
        schedule: str | Schedule = "auto",
        max_depth: int = DEFAULT_MAX_DEPTH,
        *,
        placement: str = "uniform",
        partition: int = 0,
        fresh: float = 0.0,
        alpha: float | None = None,
        neighbours: str = "replace",
        current_shape: str = "last",
    ) -> None:
        if not isinstance(d, int) or d < 1:
            raise ConfigError(f"d ({d!r}) must be an integer >= 1")
        schedule = resolve_schedule(schedule, d, neighbours)
        if isinstance(schedule, Schedule):
            if schedule.d != d or schedule.epsilon != float(epsilon):
                raise ConfigError(
                    f"schedule '{schedule.name}' is for d={schedule.d}, epsilon="
                    f"{schedule.epsilon}; build it with d={d}, epsilon={epsilon}"
                )
        elif schedule not in SCHEDULES:
            raise ConfigError(f"schedule ({schedule!r}) must be one of {SCHEDULES}")
        if neighbours not in NEIGHBOUR_NOTIONS:
            raise ConfigError(f"neighbours ({neighbours!r}) must be one of {NEIGHBOUR_NOTIONS}")
        if neighbours == "add_remove" and schedule not in BLOCK_SCHEDULES:
            raise ConfigError(
                "neighbours='add_remove' needs schedule='adaptive' or 'blocks': the time levels of "
                "the other schedules count records, and the record count is private under "
                "add/remove (docs/privacy.md P9)"
            )
        if not isinstance(max_depth, int) or not 0 <= max_depth <= MAX_TREE_DEPTH:
            raise ConfigError(f"max_depth ({max_depth!r}) must be an integer in [0, 63]")
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement ({placement!r}) must be one of {PLACEMENTS}")
        self.d = d
        self.epsilon = float(epsilon)
        self.release_every = release_every
        self.schedule_name = schedule.name if isinstance(schedule, Schedule) else schedule
        self.max_depth = max_depth
        self.placement = placement
        self.partition = int(partition)
        self.clock = TickClock(epsilon=self.epsilon, release_every=release_every)
        self.fresh = float(fresh)
        self.alpha = alpha
        self.neighbours = neighbours
        self.current_shape = current_shape
        self._blocks: BlockEngine | None = None
        self._noise = KeyedNoise(key)
        if schedule in BLOCK_SCHEDULES:
            if fresh or alpha is not None:
                raise ConfigError("fresh and alpha apply to schedule='accurate' only; drop them")
            budget = block_budget(self.epsilon, neighbours, str(schedule))  # privacy: P9
            self.worst_case_loss = budget.worst_case_loss
            self.schedule_params = {"size": budget.size, "structure": budget.structure,
                                    "counts": budget.counts, "current_shape": current_shape,
                                    "leaf_floor_scales": LEAF_FLOOR_SCALES}
            self._blocks = BlockEngine(d, budget, str(schedule), self._noise,
                                       ("dpsynth", "partition", self.partition, str(schedule)),
                                       max_depth, current_shape)
        elif schedule == "accurate":
            self.schedule: Schedule = accurate_schedule(d, self.epsilon, max_depth, alpha, fresh)
        elif isinstance(schedule, Schedule):
            self.schedule = schedule
        else:
            if fresh or alpha is not None:
                raise ConfigError("fresh and alpha apply to schedule='accurate' only; drop them")
            self.schedule = paper_schedule(d, self.epsilon)
        if self._blocks is None:
            self.worst_case_loss = check_budget(self.schedule)  # privacy: P1
            self.schedule_params = dict(self.schedule.params)
        self.placement_seed = self._noise.placement_seed()  # public: keys placement only
        self.t = 0
        self.sequence = 0
        self.clipped = 0
        self.levels: list[LevelCounters] = []  # levels[j-1] holds tree level j
        self._pending: list[np.ndarray] = []  # addresses of the open tick
        self._history: list[list[np.ndarray]] = []  # d = 1: addresses per time level
        self._last: Release | None = None
        self._tree: AccurateTree | None = None
        self._step_records = 0  # block schedules: records of the open step
        if self.schedule_name == "accurate":
            self._tree = AccurateTree(
                self.schedule, self.clock, self._noise, self._context(0), max_depth, self.fresh
            )
        self._grow()

    # -- structure ------------------------------------------------------------------------

    def _context(self, j: int) -> tuple[int | str, ...]:
        if self.schedule_name == "accurate":
            return ("dpsynth", "partition", self.partition, "accurate")
        return ("dpsynth", "partition", self.partition, "cells", j)

    def _level_epsilon(self, j: int):  # type: ignore[no-untyped-def]
        schedule = self.schedule
        return lambda r: schedule.level_epsilon(j, r)

    def _grow(self) -> None:
        """Create every tree level j with t_j ≤ t + 1 (cells of depth j exist from t_j, C.1)."""
        if self._blocks is not None:
            return
        if self._tree is not None:
            tree = self._tree
            while tree.depth_created < self.max_depth and (
                level_start(tree.depth_created + 1, self.epsilon) <= self.t + 1  # privacy: P6
            ):
                tree.add_depth()
            return
        while len(self.levels) < self.max_depth:
            j = len(self.levels) + 1
            if level_start(j, self.epsilon) > self.t + 1:  # privacy: P6 (C.1)
                return
            history = None
            if self.d == 1:  # r0 = 0: replay every completed time level (C.2)
                history = [self._history_counts(r, j) for r in range(j)]
            start = j  # the time level at creation
            self.levels.append(
                LevelCounters(
                    1 << j, self._level_epsilon(j), start, self.clock, self._noise,
                    self._context(j), history=history,
                )
            )

    def _history_counts(self, r: int, j: int) -> Counts:
        chunks = self._history[r] if r < len(self._history) else []
        if not chunks:
            return np.zeros(1 << j, np.int64)
        cells = np.concatenate(chunks) >> np.uint64(self.max_depth - j)
        return np.bincount(cells.astype(np.int64), minlength=1 << j).astype(np.int64)

    @property
    def n_cells(self) -> int:
        """Cells created so far, over all depths."""
        if self._blocks is not None:
            return sum(int(b["depths"].size) for b in self._blocks.blocks)
        depths = self._tree.depth_created if self._tree is not None else len(self.levels)
        return sum(1 << j for j in range(1, depths + 1))

    @property
    def state_nbytes(self) -> int:
        """Bytes of per-cell counter state (excluding the open tick and d = 1 history)."""
        if self._tree is not None:
            return self._tree.nbytes
        if self._blocks is not None:
            return self._blocks.nbytes
        return sum(level.nbytes for level in self.levels)

    @property
    def depth(self) -> int:
        """depth(t) = min(level(t), max_depth), 0 before t_0 (C.0); blocks: the last release."""
        if self._blocks is not None:
            return self._last.depth if self._last is not None else 0
        return max(min(level_of(self.t, self.epsilon), self.max_depth), 0) if self.t else 0

    def _next_tick_end(self) -> int:
        n = self.release_every
        next_multiple = (self.t // n + 1) * n
        level_end = level_start(level_of(self.t + 1, self.epsilon) + 1, self.epsilon) - 1
        return min(next_multiple, level_end)

    # -- streaming verbs ------------------------------------------------------------------

    def _route(self, points: Points | np.ndarray) -> np.ndarray:
        """Validated, clipped (and counted) points as Morton addresses at ``max_depth``."""
        pts, clipped = validate_points(points, self.d)
        if self.t + len(pts) > MAX_COUNT:
            raise ConfigError(f"t would exceed {MAX_COUNT} records; shard the input further")
        self.clipped += clipped
        return route(pts, depth=self.max_depth)

    def extend(self, points: Points | np.ndarray) -> list[Release]:
        """Consume records (n×d in [0,1]); return the releases completed during the call.

        A tick (and a release) ends every ``release_every`` records, which is public time only
        when the count is public: under ``neighbours="add_remove"`` this is refused — feed
        records with :meth:`add` and end steps with :meth:`step` on a public clock.
        """
        if self.neighbours == "add_remove":  # privacy: P9 (steps never counted in records)
            raise ConfigError(
                "extend() ends a step every release_every records, which reveals the private "
                "record count under neighbours='add_remove'; feed the records of a step with "
                "add(points) and end each step with step() on a public clock (a timer, a tick "
                "marker or a declared time column), docs/privacy.md P9"
            )
        addresses = self._route(points)
        if self._blocks is not None:
            return self._extend_steps(addresses)
        releases = []
        start = 0
        while start < len(addresses):
            end_t = self._next_tick_end()
            take = min(end_t - self.t, len(addresses) - start)
            self._pending.append(addresses[start:start + take])
            start += take
            self.t += take
            if self.t == end_t:
                self._end_tick()
                if self.t % self.release_every == 0:
                    releases.append(self._make_release())
        return releases

    def _extend_steps(self, addresses: np.ndarray) -> list[Release]:
        """Block schedules: a step ends every ``release_every`` records (or at :meth:`step`)."""
        releases = []
        start = 0
        while start < len(addresses):
            take = min(self.release_every - self._step_records, len(addresses) - start)
            self._blocks.add(addresses[start:start + take])  # type: ignore[union-attr]
            start += take
            self.t += take
            self._step_records += take
            if self._step_records == self.release_every:
                releases.append(self.step())
        return releases

    def add(self, points: Points | np.ndarray) -> None:
        """Add records (n×d in [0,1]) to the open step; block schedules only.

        Nothing is released until :meth:`step` ends the step. Under add/remove this is the only
        way to feed records: how many arrive never decides when a step ends (P9).
        """
        if self._blocks is None:
            raise ConfigError("add() needs schedule='adaptive' or 'blocks' (steps on a public "
                              "clock); other schedules take records through extend()")
        addresses = self._route(points)
        self._blocks.add(addresses)
        self.t += len(addresses)
        self._step_records += len(addresses)

    def step(self) -> Release:
        """End the open step now (a tick marker) and return its release; block schedules only.

        Under add/remove the step boundaries are public time: call this from a clock or a
        marker, not from anything that depends on the records (docs/privacy.md P9).
        """
        if self._blocks is None:
            raise ConfigError("step() needs schedule='adaptive' or 'blocks'; other schedules "
                              "release every release_every records")
        self._blocks.end_step()
        self._step_records = 0
        return self._make_release()

    def _end_tick(self) -> None:
        tick = np.sort(np.concatenate(self._pending)) if self._pending else np.zeros(0, np.uint64)
        self._pending = []
        if self._tree is not None:
            r = level_of(self.t, self.epsilon)
            self._tree.add_tick(tick, self.max_depth)
            if r >= 0 and self.t == level_start(r + 1, self.epsilon) - 1:  # level r ends
                size = level_start(r + 1, self.epsilon) - level_start(r, self.epsilon)
                self._tree.end_level(r, size)
            self._grow()
            return
        for j, level in enumerate(self.levels, start=1):
            cells = tick >> np.uint64(self.max_depth - j)
            if cells.size:
                starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
                counts = np.diff(np.r_[starts, cells.size])
                level.update(cells[starts].astype(np.int64), counts)
            else:
                level.update(np.zeros(0, np.int64), np.zeros(0, np.int64))
        if self.d == 1:
            r = level_of(self.t, self.epsilon)  # one tick lies in one time level
            if r >= 0:  # data before t_0 is never counted (C.2)
                while len(self._history) <= r:
                    self._history.append([])
                self._history[r].append(tick)
        self._grow()

    def _make_release(self) -> Release:
        depth = self.depth  # privacy: P6 (a function of t and the configuration only)
        size = self.t
        if self._blocks is not None:  # under add/remove the size is noisy (P9)
            size, depth, leaf_counts = self._blocks.release_counts(self.t, self.placement_seed)
        elif self._tree is not None:
            r = level_of(self.t, self.epsilon)
            so_far = self.t - level_start(r, self.epsilon) + 1 if r >= 0 else 0
            leaf_counts = self._tree.leaf_counts(self.t, depth, r, so_far)
        else:
            noisy = [self.levels[j - 1].values() for j in range(1, depth + 1)]
            consistent = make_consistent(self.t, noisy)
            leaf_counts = consistent[-1] if consistent else np.array([self.t], np.int64)
        self.sequence += 1
        self._last = Release(
            t=size,
            depth=depth,
            leaf_counts=leaf_counts,
            metadata=self.metadata(depth, size),
            placement_seed=self.placement_seed,
        )
        return self._last

    def metadata(self, depth: int | None = None, size: int | None = None) -> dict[str, Any]:
        """Public description of the releases (DESIGN §3 "Budget accounting", §4).

        ``t`` is the released size: the record count under replacement, the noisy size under
        add/remove (the true count is never published then).
        """
        meta = {
            "release_schema": RELEASE_SCHEMA_VERSION,
            "sequence": self.sequence,
            "partition": self.partition,
            "t": (self.t if self.neighbours == "replace" else 0) if size is None else size,
            "d": self.d,
            "depth": self.depth if depth is None else depth,
            "epsilon": self.epsilon,
            "neighbours": self.neighbours,
            "worst_case_loss": self.worst_case_loss,
            "schedule": self.schedule_name,
            "schedule_params": dict(self.schedule_params),
            "release_every": self.release_every,
            "max_depth": self.max_depth,
            "placement": self.placement,
            "key_fingerprint": self._noise.fingerprint(),
        }
        if self._blocks is not None:
            meta["step"] = self._blocks.step
        return meta

    def release(self) -> Release:
        """The most recent release (t = 0, one empty root before the first)."""
        if self._last is None:
            return Release(0, 0, np.zeros(1, np.int64), self.metadata(0), self.placement_seed)
        return self._last

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes, valid at any point (also mid-tick). No key material."""
        return pack_state({
            "config": {
                "d": self.d, "epsilon": self.epsilon, "release_every": self.release_every,
                "schedule": self.schedule_name, "max_depth": self.max_depth,
                "placement": self.placement, "partition": self.partition,
                "fresh": self.fresh, "alpha": self.alpha, "neighbours": self.neighbours,
                "current_shape": self.current_shape,
            },
            "key_fingerprint": self._noise.fingerprint(),
            "t": self.t,
            "sequence": self.sequence,
            "clipped": self.clipped,
            "pending": (np.concatenate(self._pending) if self._pending
                        else np.zeros(0, np.uint64)),
            "history": [np.concatenate(c) if c else np.zeros(0, np.uint64)
                        for c in self._history],
            "levels": [level.state() for level in self.levels],
            "tree": None if self._tree is None else self._tree.state(),
            "blocks": None if self._blocks is None else self._blocks.state(),
            "step_records": self._step_records,
            "last": None if self._last is None else {
                "t": self._last.t, "depth": self._last.depth,
                "leaf_counts": self._last.leaf_counts, "metadata": self._last.metadata,
            },
        })

    @classmethod
    def restore(
        cls, blob: bytes, key: bytes, schedule: Schedule | None = None
    ) -> OnlineSynthesizer:
        """Continue from :meth:`snapshot`; the next releases equal an uninterrupted run's.

        ``schedule`` must be given again when the synthesizer was built from a Schedule object.
        """
        state = unpack_state(blob)
        config = dict(state["config"])
        if schedule is not None:
            if schedule.name != config["schedule"]:
                raise ConfigError(
                    f"schedule '{schedule.name}' differs from the snapshot's "
                    f"'{config['schedule']}'; pass the schedule the snapshot was made with"
                )
            config["schedule"] = schedule
        self = cls(key=key, **config)
        if self._noise.fingerprint() != state["key_fingerprint"]:
            raise StateCorruptError(
                "snapshot was written under a different noise key; restore it with that key "
                "(a new key must start from an empty state)"
            )
        self.t, self.sequence, self.clipped = state["t"], state["sequence"], state["clipped"]
        pending = state["pending"]
        self._pending = [pending] if pending.size else []
        self._history = [[h] if h.size else [] for h in state["history"]]
        if self._tree is not None:
            self._tree.load_state(state["tree"])
        if self._blocks is not None:
            self._blocks.load_state(state["blocks"])
            self._step_records = int(state["step_records"])
        self.levels = [
            LevelCounters.from_state(
                level_state, self._level_epsilon(j), self.clock, self._noise, self._context(j)
            )
            for j, level_state in enumerate(state["levels"], start=1)
        ]
        last = state["last"]
        if last is not None:
            self._last = Release(
                last["t"], last["depth"], last["leaf_counts"], last["metadata"],
                self.placement_seed,
            )
        return self
