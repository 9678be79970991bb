"""The fitted model g_t: multiplicative weights over a weighted support of domain points.

Layer: core; post-processing only (it sees noisy measurements and public counts, never data).

Representation (decision T4 of docs/tabular.md). A model is a set of M support points of X with
non-negative weights summing to the current record count (public, as |f| in paper 003 §4.2.1).
If |X| ≤ ``full_domain_limit`` the support is all of X, and this is plain MW over the full
domain. Otherwise the support starts as M points drawn uniformly from X (public randomness) and
is **rejuvenated** (:meth:`ParticleModel.rejuvenate`): resampled by weight, one attribute of each
point moved to a draw from the model's own 1-way marginal, and the weights refit to the model's
previous 2-way answers — a function of the model alone, so privacy is unaffected.

Update rules (``rule``), for a workload i with measurement m and model answer q = q_i(h), applied
to the cell c(x) of every support point x (paper §2.5, all cells of a workload at once):

``ratio`` (default) — ``w_x ← w_x · ((max(m_c,0)+δ)/(q_c+δ))^η``: the multiplicative-weights step
    that is the entropic (KL) projection onto the measured marginal when η = 1 (iterative
    proportional fitting); δ = 1e-3 records.
``paper`` — ``w_x ← w_x · exp(η (m_c − q_c) / (2|h|))``: the printed MW update (η = 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import Context, KeyedNoise
from dpsynth.tabular.workloads import Workloads

RULES = ("ratio", "paper")
_DELTA = 1e-3


class ParticleModel:
    """Weighted support (M, p) codes with weights; answers 2-way workloads; MW fitting."""

    def __init__(self, workloads: Workloads, support: np.ndarray, weights: np.ndarray,
                 *, full: bool) -> None:
        self.workloads = workloads
        self.support = np.ascontiguousarray(support, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64).copy()
        self.full = full
        self._set_support(self.support)

    def _set_support(self, support: np.ndarray) -> None:
        self.support = support
        self._flat = self.workloads.flat_index(support)
        # (W, M) cells per workload, numbered from 0 (the compiled projection's layout)
        self._by_workload = np.ascontiguousarray(self._flat.T - self.workloads.offsets[:-1, None])

    @classmethod
    def initial(cls, workloads: Workloads, noise: KeyedNoise, context: Context, *,
                support_size: int, full_domain_limit: int) -> ParticleModel:
        """Empty model (weight 0) on all of X if small, else on uniform public support points."""
        sizes = workloads.sizes
        n_cells = int(np.prod(np.array(sizes, dtype=object)))
        if n_cells <= full_domain_limit:
            grid = np.indices(sizes).reshape(len(sizes), -1).T
            return cls(workloads, grid, np.zeros(n_cells), full=True)
        if support_size < 1:
            raise ConfigError(f"support_size ({support_size}) must be an integer >= 1")
        streams = np.arange(support_size, dtype=np.uint64)
        cols = []
        for j, size in enumerate(sizes):
            u = noise.uniform_at(context, streams, np.full(support_size, j, np.uint64))
            cols.append(np.minimum((u * size).astype(np.int64), size - 1))
        return cls(workloads, np.stack(cols, axis=1), np.zeros(support_size), full=False)

    # -- answers --------------------------------------------------------------------------

    @property
    def total(self) -> float:
        return float(self.weights.sum())

    def answers(self, weights: np.ndarray | None = None) -> list[np.ndarray]:
        """q_i(model) for every workload (or for other weights on the same support)."""
        w = self.weights if weights is None else weights
        return self.workloads.split(self.workloads.answers_flat(self._flat, w))

    def answer(self, i: int, weights: np.ndarray | None = None) -> np.ndarray:
        w = self.weights if weights is None else weights
        cells = self._flat[:, i] - self.workloads.offsets[i]
        return np.bincount(cells, weights=w, minlength=int(self.workloads.cells[i]))

    def cells_by_workload(self) -> np.ndarray:
        """(W, M): the cell of every support point in every workload (cells of each workload
        numbered from 0)."""
        return self._by_workload

    def scaled(self, total: float) -> np.ndarray:
        """Weights rescaled to mass ``total`` (uniform if the model is empty)."""
        mass = self.total
        if mass <= 0:
            return np.full(self.weights.size, total / self.weights.size)
        return self.weights * (total / mass)

    # -- fitting --------------------------------------------------------------------------

    def fit(self, weights: np.ndarray, measurements: list[tuple[int, np.ndarray]], *,
            passes: int, rule: str = "ratio", lr: float = 1.0) -> np.ndarray:
        """MW passes over ``measurements`` (workload index, noisy table), from ``weights``.

        The total mass is kept (it is the public record count).
        """
        if rule not in RULES:
            raise ConfigError(f"fit rule ({rule!r}) must be one of {RULES}")
        w = weights.copy()
        total = float(w.sum())
        if total <= 0:
            return w
        for _ in range(passes):
            for i, m in measurements:
                cells = self._flat[:, i] - self.workloads.offsets[i]
                q = np.bincount(cells, weights=w, minlength=int(self.workloads.cells[i]))
                if rule == "ratio":
                    factor = ((np.maximum(m, 0.0) + _DELTA) / (q + _DELTA)) ** lr
                else:
                    factor = np.exp(np.clip(lr * (m - q) / (2.0 * total), -50.0, 50.0))
                w *= factor[cells]
                w *= total / w.sum()
        return w

    def rejuvenate(self, noise: KeyedNoise, context: Context, *, passes: int,
                   guides: list[np.ndarray] | None = None) -> None:
        """Resample–move the support, then refit to the model's own 2-way answers (public).

        The moved attribute j of a point is redrawn from the model's 1-way marginal, or, with
        ``guides`` (a non-negative table per workload, e.g. the counter shares — public), from
        the guide of (j, a) conditioned on the point's value of a random partner attribute a,
        so that points land where pairs of attributes are jointly likely (a rare combination,
        such as age_10 = age // 10 on Adult, is found in a few moves instead of never).
        """
        if self.full or self.total <= 0:
            return
        targets = self.answers()
        total, size, sizes = self.total, self.weights.size, self.workloads.sizes
        streams = np.arange(size, dtype=np.uint64)
        u = noise.uniform_at(context, streams, np.zeros(size, np.uint64))
        cdf = np.cumsum(self.weights)
        points = (np.arange(size) + u[0]) * (cdf[-1] / size)  # systematic resampling
        support = self.support[np.minimum(np.searchsorted(cdf, points), size - 1)]
        attr = np.minimum((noise.uniform_at(context, streams, np.ones(size, np.uint64))
                           * len(sizes)).astype(np.int64), len(sizes) - 1)
        draw = noise.uniform_at(context, streams, np.full(size, 2, np.uint64))
        for j, s in enumerate(sizes):
            rows = np.flatnonzero(attr == j)
            marginal = np.bincount(self.support[:, j], weights=self.weights, minlength=s)
            cdf_j = np.cumsum(marginal)
            support[rows, j] = np.minimum(np.searchsorted(cdf_j, draw[rows] * cdf_j[-1]), s - 1)
        if guides is not None:
            partner = noise.uniform_at(context, streams, np.full(size, 3, np.uint64))
            self._guided_moves(support, attr, partner, draw, guides)
        self._set_support(support)
        start = np.full(size, total / size)
        shares = np.concatenate(targets) / total  # the ratio rule, every workload, α = 1
        self.weights = project(self._by_workload, self.workloads.offsets, start, shares,
                               np.ones(len(targets)), total, passes)

    def _guided_moves(self, support: np.ndarray, attr: np.ndarray, partner_u: np.ndarray,
                      draw: np.ndarray, guides: list[np.ndarray]) -> None:
        """Redraw ``support[x, attr[x]]`` from a guide conditioned on a partner attribute
        (points whose conditional row is empty keep their 1-way draw)."""
        sizes, p = self.workloads.sizes, len(self.workloads.sizes)
        index = {pair: i for i, pair in enumerate(self.workloads.pairs)}
        partner = np.minimum((partner_u * (p - 1)).astype(np.int64), p - 2)
        partner += partner >= attr  # a uniform attribute other than the moved one
        for (a, b), i in index.items():
            table = np.maximum(np.asarray(guides[i], np.float64), 0.0).reshape(sizes[a], sizes[b])
            for j, other, cond in ((b, a, table), (a, b, table.T)):
                rows = np.flatnonzero((attr == j) & (partner == other))
                if rows.size == 0:
                    continue
                cdf = np.cumsum(cond[support[rows, other]], axis=1)
                mass = cdf[:, -1]
                ok = mass > 0
                picks = (cdf < (draw[rows] * mass)[:, None]).sum(axis=1)
                support[rows[ok], j] = np.minimum(picks[ok], sizes[j] - 1)

    # -- records --------------------------------------------------------------------------

    def records(self, weights: np.ndarray, n: int) -> np.ndarray:
        """Exactly ``n`` records: weights rounded by largest remainder (deterministic)."""
        if n <= 0 or weights.sum() <= 0:
            return np.zeros((0, self.support.shape[1]), np.int64)
        exact = weights * (n / weights.sum())
        counts = np.floor(exact).astype(np.int64)
        rest = n - int(counts.sum())
        if rest > 0:
            order = np.argsort(-(exact - counts), kind="stable")
            counts[order[:rest]] += 1
        return np.repeat(self.support, counts, axis=0)

    def state(self) -> dict[str, Any]:
        return {"support": self.support, "weights": self.weights, "full": self.full}

    @classmethod
    def from_state(cls, workloads: Workloads, state: dict[str, Any]) -> ParticleModel:
        try:
            support, weights = np.asarray(state["support"]), np.asarray(state["weights"])
            if support.ndim != 2 or support.shape != (weights.size, len(workloads.sizes)):
                raise ValueError("shape")
            return cls(workloads, support, weights, full=bool(state["full"]))
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise StateCorruptError(
                f"model state is damaged ({exc}); restore from an intact snapshot"
            ) from None


@njit(cache=True)
def project(cells: np.ndarray, offsets: np.ndarray, start: np.ndarray, shares: np.ndarray,
            alpha: np.ndarray, total: float, passes: int) -> np.ndarray:  # pragma: no cover
    """``passes`` sweeps of damped ratio steps, ``w_x ← w_x · ((total·p_i[c] + δ) /
    (q_i[c] + δ))^{α_i}`` on the cell c of x, over the workloads i with α_i > 0, the mass
    renormalised to ``total`` after each (compiled; the sweep of :meth:`ParticleModel.fit` with
    per-workload exponents). ``cells`` is :meth:`ParticleModel.cells_by_workload`, ``shares``
    the targets' proportions, concatenated."""
    w = start.copy()
    n_workloads, n_points = cells.shape
    for _ in range(passes):
        for i in range(n_workloads):
            a = alpha[i]
            if a <= 0.0:
                continue
            off = offsets[i]
            q = np.zeros(offsets[i + 1] - off)
            for x in range(n_points):
                q[cells[i, x]] += w[x]
            factor = np.empty(q.size)
            mass = 0.0
            for c in range(q.size):
                factor[c] = ((shares[off + c] * total + _DELTA) / (q[c] + _DELTA)) ** a
                mass += q[c] * factor[c]
            if mass <= 0.0:
                continue
            for c in range(q.size):
                factor[c] *= total / mass
            for x in range(n_points):
                w[x] *= factor[cells[i, x]]
    return w
