"""Accurate mode: per-level noisy histograms, exact GLS consistency, inverse-variance pooling.

Layer: core. The design that ``../shared/specs/accuracy-study.md`` measured best among the honest
variants of HVZ Alg 1 ("CD500": its §2 variants (c) and (d)), with the optional fresh counter of
"ACD500" (variant (a)):

* **Budget** (variant (d)): all of a cell's level budget goes to its end-of-level count (f_S = 1,
  no Sparse Counter); the schedule is normalised per time level so that every root-to-leaf path
  spends exactly ε/2: ε_{j,s} = (ε/2)·α^{j−s} / Σ_{k=1}^{m} α^{k−s}, j ≤ m = min(s, max_depth),
  α = 2^{(1−1/d)/2} by default (:func:`accurate_schedule`).
* **Per-level histograms** (variant (c)): at the end of time level i every cell of depth
  j ≤ min(i, max_depth) releases z = (its count of level-i records) + Lap_Z(1/ε_{j,i}); with the
  level's size n_i = t_{i+1} − t_i, which is public, these form a complete hierarchical
  histogram. :func:`gls_tree` computes its exact generalised-least-squares estimate (bottom-up
  inverse-variance averaging, top-down distribution of the discrepancy to the known root).
* **Pooling**: each node keeps A_c = Σ_i x_{c,i} over completed levels, an unbiased estimate of
  its count in the prefix whatever the stream does (issue 14: the former inverse-variance
  weights n_i/V_{j,i} assumed a stationary stream and, as V → 0 at large ε, let one early level
  decide the shape); a release splits every parent's count between its children in the
  proportions of their clipped A (equal split when both are 0), rounding half up — a
  data-independent rule. Exactly t points.
* **Fresh option**: a Binary Mechanism over the ticks of the current level with a share f of
  each cell's budget enters the pooling as one more tree whose root (records so far in the
  level) is public, so releases move within a level. Without it, releases change only at level
  ends.

Privacy (docs/privacy.md P8): a replaced record at time level s changes the level-s counts of two
cells per depth j ≤ min(s, max_depth) by one; each is released once with Lap_Z(1/((1−f)ε_{j,s}))
and, with the fresh option, through a Binary Mechanism at f·ε_{j,s}: ε_{j,s} per cell, ε/2 per
path. Everything else is post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth._types import Counts, LeafCounts
from dpsynth.accounting import Schedule, check_budget
from dpsynth.clock import TickClock, level_of, level_start
from dpsynth.counters.binary import binary_levels, node_noise
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, discrete_laplace_variance

#: The default share f of each cell's budget for the open level's Binary Mechanism: without it
#: the open level, up to half of the records, is invisible and a drifting stream is drawn where
#: it was (issue 14; tuned on the moving blob and uniform streams, docs/benchmarks.md §13).
DEFAULT_FRESH = 0.3


def default_alpha(d: int) -> float:
    """α = 2^{(1−1/d)/2}: the paper's depth ratio (1 for d = 1)."""
    alpha: float = 2.0 ** ((1.0 - 1.0 / d) / 2.0)  # float ** float is Any to the checker
    return alpha


def accurate_schedule(
    d: int, epsilon: float, max_depth: int, alpha: float | None = None, fresh: float = 0.0
) -> Schedule:
    """Normalised schedule: Σ_{j ≤ min(s, max_depth)} ε_{j,s} = ε/2 for every time level s ≥ 1.

    >>> s = accurate_schedule(2, 1.0, 20)
    >>> round(sum(s.level_epsilon(j, 7) for j in range(1, 8)), 12)
    0.5
    """
    a = default_alpha(d) if alpha is None else float(alpha)
    if not (math.isfinite(a) and a > 0):
        raise ConfigError(f"alpha ({alpha!r}) must be a finite number > 0")
    if not 0.0 <= fresh < 1.0:
        raise ConfigError(f"fresh ({fresh!r}) must lie in [0, 1): the share of each cell's budget")

    def level_epsilon(j: int, r: int) -> float:
        top = min(r, max_depth)
        if j < 1 or j > top:
            return 0.0
        weights = a ** (np.arange(1, top + 1) - r)
        return float(epsilon / 2 * a ** (j - r) / weights.sum())

    return Schedule(
        name="accurate",
        d=d,
        epsilon=float(epsilon),
        level_epsilon=level_epsilon,
        replays_history=False,
        params={"alpha": a, "fresh": float(fresh), "max_depth": int(max_depth), "f_S": 1.0},
    )


def gls_tree(noisy: Sequence[np.ndarray], variances: Sequence[float], root: float) -> list[Any]:
    """Exact GLS of a complete binary tree whose root is known and whose depth-j nodes carry
    independent noise of variance ``variances[j-1]``.

    ``noisy[j-1]`` holds the 2^j measurements of depth j. Returns the consistent estimates per
    depth (float64): every parent equals the sum of its children and depth 1 sums to ``root``.
    Bottom-up, each node's measurement is averaged with the sum of its children's estimates by
    inverse variance; top-down, a parent's final value minus its children's sum is shared in
    proportion to the children's variances (equal here). Verified against a dense constrained
    least-squares solve in the tests.
    """
    depth = len(noisy)
    if depth == 0:
        return []
    z = [np.asarray(level, dtype=np.float64) for level in noisy]
    merged: list[np.ndarray] = [np.empty(0)] * depth
    merged_var = [0.0] * depth
    merged[-1], merged_var[-1] = z[-1], float(variances[-1])
    for j in range(depth - 2, -1, -1):  # bottom-up
        children = merged[j + 1].reshape(-1, 2).sum(axis=1)
        children_var = 2.0 * merged_var[j + 1]
        own_var = float(variances[j])
        weight = (1.0 / own_var) / (1.0 / own_var + 1.0 / children_var)
        merged[j] = weight * z[j] + (1.0 - weight) * children
        merged_var[j] = 1.0 / (1.0 / own_var + 1.0 / children_var)
    out: list[np.ndarray] = []
    parent = np.array([float(root)])
    for j in range(depth):  # top-down
        pairs = merged[j].reshape(-1, 2)
        gap = parent - pairs.sum(axis=1)
        level = (pairs + gap[:, None] / 2.0).reshape(-1)
        out.append(level)
        parent = level
    return out


def split_by_fractions(parents: Counts, weights: np.ndarray) -> Counts:
    """Split integer parent counts between children in proportion to clipped ``weights``.

    Equal split when both weights are 0; child 0 gets m·f rounded to the nearest integer, ties
    going to child 0 of even parents and to child 1 of odd parents: a rule that looks at no
    data. Children of p are 2p and 2p+1.

    >>> split_by_fractions(np.array([10, 5, 3]), np.array([3.0, 1.0, -2.0, 0.0, 0, 0])).tolist()
    [8, 2, 2, 3, 2, 1]
    """
    w = np.clip(np.asarray(weights, dtype=np.float64).reshape(-1, 2), 0.0, None)
    total = w.sum(axis=1)
    fraction = np.divide(w[:, 0], total, out=np.full(total.shape, 0.5), where=total > 0)
    m = np.asarray(parents, dtype=np.int64)
    share = m * fraction
    even = np.arange(m.size) % 2 == 0
    first = np.where(even, np.floor(share + 0.5), np.ceil(share - 0.5)).astype(np.int64)
    first = np.clip(first, 0, m)
    return np.stack([first, m - first], axis=1).reshape(-1)


class AccurateTree:
    """All tree levels of one input partition in accurate mode (see the module docstring).

    State per cell: the exact count of the current time level (int64, never released) and the
    pooled estimate A (float64): 16 bytes.
    """

    def __init__(
        self,
        schedule: Schedule,
        clock: TickClock,
        noise: KeyedNoise,
        context: Sequence[int | str],
        max_depth: int,
        fresh: float = 0.0,
    ) -> None:
        self.schedule = schedule
        self.clock = clock
        self._noise = noise
        self._context = tuple(context)
        self.max_depth = max_depth
        self.fresh = float(fresh)
        self.level_counts: list[Counts] = []  # [j-1]: exact counts of depth j, current level
        self.pooled: list[np.ndarray] = []  # [j-1]: A of depth j
        self.tick_in_level = 0

    # -- structure -------------------------------------------------------------------------

    @property
    def depth_created(self) -> int:
        """Number of depths whose cells exist."""
        return len(self.level_counts)

    def add_depth(self) -> None:
        """Create the cells of the next depth (at t_j, spec C.1)."""
        j = self.depth_created + 1
        self.level_counts.append(np.zeros(1 << j, np.int64))
        self.pooled.append(np.zeros(1 << j, np.float64))

    # -- ticks and levels -----------------------------------------------------------------

    def add_tick(self, sorted_addresses: np.ndarray, address_depth: int) -> None:
        """Count one tick's records (Morton addresses at ``address_depth``, sorted)."""
        for j, counts in enumerate(self.level_counts, start=1):
            cells = sorted_addresses >> np.uint64(address_depth - j)
            counts += np.bincount(cells.astype(np.int64), minlength=counts.size)
        self.tick_in_level += 1

    def _cell_scale(self, j: int, r: int) -> float:
        """Scale of the end-of-level count of a depth-j cell in level r: Lap_Z(1/((1−f)ε))."""
        return 1.0 / ((1.0 - self.fresh) * self.schedule.level_epsilon(j, r))

    def end_level(self, r: int, level_size: int) -> None:
        """Release level r's noisy histogram, make it consistent (GLS) and pool it."""
        depth = min(r, self.depth_created)
        noisy, variances = [], []
        for j in range(1, depth + 1):
            scale = self._cell_scale(j, r)
            cells = np.arange(1 << j, dtype=np.int64)
            lam = self._noise.discrete_laplace_at(
                scale, (*self._context, "depth", j, "level", r, "end"), cells, 0
            )
            noisy.append(self.level_counts[j - 1] + lam)  # privacy: P8
            variances.append(discrete_laplace_variance(scale))
        for j, estimate in enumerate(gls_tree(noisy, variances, level_size), start=1):
            self.pooled[j - 1] += estimate  # the prefix's counts: unbiased whatever the drift
        for counts in self.level_counts:
            counts[:] = 0
        self.tick_in_level = 0

    # -- releases --------------------------------------------------------------------------

    def _fresh_estimates(self, r: int, level_so_far: int) -> list[np.ndarray]:
        """Fresh option: Binary Mechanism outputs over this level's ticks, made consistent."""
        horizon = self.clock.ticks_in_level(r)
        levels = binary_levels(horizon)
        step = self.tick_in_level
        noisy, variances = [], []
        for j in range(1, min(r, self.depth_created) + 1):
            scale = levels / (self.fresh * self.schedule.level_epsilon(j, r))
            cells = np.arange(1 << j, dtype=np.int64)
            bm = node_noise(
                self._noise, scale, (*self._context, "depth", j, "level", r, "bm"),
                cells.astype(np.uint64), np.full(cells.size, step), levels,
            )
            noisy.append(self.level_counts[j - 1] + bm)  # privacy: P8 (fresh share)
            variances.append(bin(step).count("1") * discrete_laplace_variance(scale))
        return gls_tree(noisy, variances, level_so_far)

    def leaf_counts(self, t: int, depth: int, r: int, level_so_far: int) -> Counts:
        """Consistent leaf counts of a release at time t (root t, depth ``depth``)."""
        weights = [p.copy() for p in self.pooled[:depth]]
        if self.fresh > 0 and self.tick_in_level > 0 and r >= 1:
            for j, extra in enumerate(self._fresh_estimates(r, level_so_far), start=1):
                if j <= depth:
                    weights[j - 1] += extra
        counts = np.array([t], np.int64)
        for w in weights:
            counts = split_by_fractions(counts, w)
        return counts

    @property
    def nbytes(self) -> int:
        """Bytes of per-cell state (16 per cell)."""
        return sum(c.nbytes for c in self.level_counts) + sum(p.nbytes for p in self.pooled)

    # -- snapshots -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Arrays and the tick index; no noise, no key."""
        return {
            "level_counts": [c.copy() for c in self.level_counts],
            "pooled": [p.copy() for p in self.pooled],
            "tick_in_level": self.tick_in_level,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.level_counts = [np.asarray(c, dtype=np.int64).copy() for c in state["level_counts"]]
        self.pooled = [np.asarray(p, dtype=np.float64).copy() for p in state["pooled"]]
        self.tick_in_level = int(state["tick_in_level"])


class AccurateMechanism:
    """:class:`AccurateTree` behind the online mechanism protocol (:mod:`dpsynth.online.mechanism`).

    Ticks split at level ends (the end-of-level counts of P8); the release depth is
    min(level(t), max_depth), a function of t only (P6).
    """

    counts_records = True  # time levels are record counts: replacement neighbours only
    name = "accurate"

    def __init__(self, d: int, epsilon: float, clock: TickClock, noise: KeyedNoise,
                 context: tuple[int | str, ...], max_depth: int,
                 alpha: float | None, fresh: float) -> None:
        self.schedule = accurate_schedule(d, epsilon, max_depth, alpha, fresh)
        self.params = dict(self.schedule.params)
        self.worst_case_loss = check_budget(self.schedule)  # privacy: P1, P8
        self.clock = clock
        self.max_depth = max_depth
        self.tree = AccurateTree(self.schedule, clock, noise, context, max_depth, fresh)
        self._pending: list[np.ndarray] = []
        self._grow(0)

    def _grow(self, t: int) -> None:
        tree = self.tree
        while tree.depth_created < self.max_depth and (
            level_start(tree.depth_created + 1, self.clock.epsilon) <= t + 1  # privacy: P6
        ):
            tree.add_depth()

    def tick_limit(self, t: int) -> int:
        """The record count at which the open tick must end: the end of t's time level."""
        return level_start(level_of(t + 1, self.clock.epsilon) + 1, self.clock.epsilon) - 1

    def depth(self, t: int) -> int:
        """min(level(t), max_depth), 0 before t_0."""
        return max(min(level_of(t, self.clock.epsilon), self.max_depth), 0) if t else 0

    def add(self, addresses: np.ndarray) -> None:
        """Records of the open tick (Morton addresses at ``max_depth``)."""
        self._pending.append(addresses)

    def end_tick(self, t: int) -> None:
        """Count the tick; at a level end release that level's histogram (P8)."""
        tick = np.sort(np.concatenate(self._pending)) if self._pending else np.zeros(0, np.uint64)
        self._pending = []
        epsilon = self.clock.epsilon
        r = level_of(t, epsilon)
        self.tree.add_tick(tick, self.max_depth)
        if r >= 0 and t == level_start(r + 1, epsilon) - 1:  # level r ends
            self.tree.end_level(r, level_start(r + 1, epsilon) - level_start(r, epsilon))
        self._grow(t)

    def release_counts(self, t: int, placement_seed: bytes) -> LeafCounts:
        """t, the depth and pooled leaf counts summing to t."""
        depth = self.depth(t)
        r = level_of(t, self.clock.epsilon)
        so_far = t - level_start(r, self.clock.epsilon) + 1 if r >= 0 else 0
        return LeafCounts(t, depth, self.tree.leaf_counts(t, depth, r, so_far))

    def extra_metadata(self) -> dict[str, Any]:
        """Nothing beyond the common metadata."""
        return {}

    @property
    def n_cells(self) -> int:
        """Cells created so far, over all depths."""
        return sum(1 << j for j in range(1, self.tree.depth_created + 1))

    @property
    def nbytes(self) -> int:
        """Bytes of per-cell state."""
        return self.tree.nbytes

    def state(self) -> dict[str, Any]:
        """Snapshot entries: the open tick and the tree."""
        pending = np.concatenate(self._pending) if self._pending else np.zeros(0, np.uint64)
        return {"pending": pending, "tree": self.tree.state()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self._pending = [state["pending"]] if state["pending"].size else []
        self.tree.load_state(state["tree"])
