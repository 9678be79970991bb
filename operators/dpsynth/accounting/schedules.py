"""Privacy accounting of per-level budgets: what one replaced record can cost, and the check.

Layer: core. Every cell of the binary tree at level j ≥ 1 runs an inhomogeneous sparse counter
that spends ε_{j,r} during time level r (the root, level 0, is free: the record count t is
public). A record arriving at time level s touches one root-to-leaf path; a *replaced* record
(the neighbouring relation of dpsynth) touches two. By basic composition along a path, the
privacy loss of one replaced record is therefore at most ``2 · sup_s pathloss(s)`` with
``pathloss(s) = Σ_j ε_{j,s}`` over the cell levels j whose counters see a record of time level s
(HVZ Prop 5.9 / dissertation Prop 5.9 and 5.12). :func:`check_budget` enforces
``2 · sup_s pathloss(s) ≤ ε`` before anything is released (docs/privacy.md P1).

Schedules
---------
d ≥ 2 (eq. 5.3)
    ``ε_{j,r} = C1 · ε · 2^{(j−r)(1−1/d)/2}`` for r ≥ j, with
    ``C1 = (1 − 2^{−(1−1/d)/2}) / 2``. A cell of level j counts only records from time level j
    on, so a record of time level s is charged by the levels j = 1..s and, with
    ``α = 2^{(1−1/d)/2}``, ``pathloss(s) = (ε/2)(1 − α^{−s}) < ε/2``.
d = 1 (eq. 5.12)
    ``ε_{j,r} = (3/π²) · ε / (j+1)²`` for every r. Cells replay the history (they count data of
    all time levels), so a record of any time level is charged by every level that will ever
    exist: ``pathloss = Σ_{j≥1} ε_j = ε (1/2 − 3/π²) ≈ 0.196 ε``. The dissertation states the
    total as ε; that is an arithmetic erratum (docs/algorithms.md C.9): over two paths the true
    total is ``(1 − 6/π²) ε ≈ 0.392 ε``, comfortably within ε.

Levels that can exist
---------------------
Cells of level j appear once t reaches ``t_j = ⌈2^j / ε⌉`` records; beyond 2^63 records nothing
exists, so accounting stops at :data:`MAX_LEVEL` = 64. A generic replaying (d = 1) schedule is
summed over j = 1..MAX_LEVEL. The paper's d = 1 schedule carries an analytic tail bound and is
accounted with its full series Σ_{j≥1}, as in the paper: at most 0.005 ε more than the levels
that can exist, the conservative direction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Real

from dpsynth.accounting._checks import (
    _BUDGET_RTOL,
    _check_d,
    _check_epsilon,
    _check_level,
    _fmt_pair,
    _show,
)
from dpsynth.errors import BudgetExceededError, ConfigError

__all__ = [
    "MAX_LEVEL",
    "Schedule",
    "check_budget",
    "closed_form_path_loss",
    "paper_schedule",
    "worst_case_loss",
]

#: Highest cell level that can ever exist (level j needs ⌈2^j / ε⌉ records; t < 2^63).
MAX_LEVEL = 64



def _trigamma(x: float) -> float:
    """ψ'(x) = Σ_{k≥0} 1/(x+k)² for x > 0 (recurrence up to x ≥ 20, then asymptotic series)."""
    acc = 0.0
    while x < 20.0:
        acc += 1.0 / (x * x)
        x += 1.0
    inv = 1.0 / x
    inv2 = inv * inv
    # 1/x + 1/(2x²) + Σ B_2k / x^(2k+1); truncation error < 1e-17 at x ≥ 20.
    series = inv2 * (1 / 6 - inv2 * (1 / 30 - inv2 * (1 / 42 - inv2 * (1 / 30 - inv2 * 5 / 66))))
    return acc + inv + 0.5 * inv2 + inv * series


@dataclass(frozen=True)
class Schedule:
    """Per-level privacy budgets ε_{j,r} of the tree's sparse counters.

    Parameters
    ----------
    name : str
        Label used in messages and release metadata (``"paper"`` for :func:`paper_schedule`).
    d : int
        Dimension of the data domain, ≥ 1.
    epsilon : float
        Total budget the schedule must respect for one replaced record.
    level_epsilon : Callable[[int, int], float]
        ``ε_{j,r}``: budget spent by a cell of level ``j ≥ 1`` during time level ``r ≥ 0``.
    replays_history : bool
        True (d = 1): a cell of level j counts the data of all time levels r ≥ 0, so ε_{j,r} is
        defined for r < j too and every level charges every record. False (d ≥ 2): a cell of
        level j spends only at r ≥ j.
    params : dict
        Public parameters of the schedule, for release metadata (e.g. ``{"C1": …, "alpha": …}``).
    tail_loss : Callable[[int, int], float] or None
        Optional bound on ``Σ_{j > max_level} ε_{j,s}`` as a function of ``(s, max_level)``, for a
        replaying schedule whose series is accounted in full. None: levels above ``max_level``
        cost nothing (they cannot exist).
    """

    name: str
    d: int
    epsilon: float
    level_epsilon: Callable[[int, int], float]
    replays_history: bool
    params: dict[str, float | str] = field(default_factory=dict)
    tail_loss: Callable[[int, int], float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"`name` ({_show(self.name)}) must be a non-empty string")
        object.__setattr__(self, "d", _check_d(self.d))
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        if not callable(self.level_epsilon):
            raise ConfigError(
                f"`level_epsilon` ({_show(self.level_epsilon)}) must be a callable (j, r) -> float"
            )
        if not isinstance(self.replays_history, bool):
            raise ConfigError(
                f"`replays_history` ({_show(self.replays_history)}) must be True or False"
            )
        if not isinstance(self.params, dict):
            raise ConfigError(f"`params` ({_show(self.params)}) must be a dict")
        if self.tail_loss is not None and not callable(self.tail_loss):
            raise ConfigError(f"`tail_loss` ({_show(self.tail_loss)}) must be callable or None")

    def charged_levels(self, s: int, max_level: int = MAX_LEVEL) -> range:
        """Cell levels j whose counters spend on a record of time level ``s``.

        Parameters
        ----------
        s : int
            Time level of the record, ≥ 0.
        max_level : int
            Highest cell level that can exist.

        Returns
        -------
        range
            ``1..s`` (capped at ``max_level``) without history replay, ``1..max_level`` with it.

        Examples
        --------
        >>> paper_schedule(2, 1.0).charged_levels(3)
        range(1, 4)
        >>> paper_schedule(1, 1.0).charged_levels(3)
        range(1, 65)
        """
        s = _check_level("s", s, 0)
        max_level = _check_level("max_level", max_level, 0)
        top = max_level if self.replays_history else min(s, max_level)
        return range(1, top + 1)

    def contributions(self, s: int, max_level: int = MAX_LEVEL) -> list[tuple[int, float]]:
        """Checked ``(j, ε_{j,s})`` for every charged level (excluding any analytic tail).

        Raises
        ------
        ConfigError
            If some ε_{j,s} is negative, not finite or not a number.
        """
        s = _check_level("s", s, 0)
        return [(j, self._checked(j, s)) for j in self.charged_levels(s, max_level)]

    def path_loss(self, s: int, max_level: int = MAX_LEVEL) -> float:
        """Privacy loss on one root-to-leaf path of a record of time level ``s``.

        Parameters
        ----------
        s : int
            Time level of the record, ≥ 0.
        max_level : int
            Highest cell level that can exist.

        Returns
        -------
        float
            ``Σ_{j ∈ charged_levels(s)} ε_{j,s}``, plus ``tail_loss(s, max_level)`` if given.

        Examples
        --------
        >>> paper_schedule(2, 1.0).path_loss(0)
        0.0
        >>> round(paper_schedule(1, 1.0).path_loss(5), 6)
        0.196036
        """
        total = math.fsum(eps for _, eps in self.contributions(s, max_level))
        if self.tail_loss is not None:
            raw = self.tail_loss(s, max_level)
            real = isinstance(raw, Real) and not isinstance(raw, bool)
            tail = float(raw) if real else math.nan
            if not (math.isfinite(tail) and tail >= 0):
                raise ConfigError(
                    f"`tail_loss` at (s={s}, max_level={max_level}) ({_show(raw)}) must be a "
                    f"finite number >= 0; fix schedule {self.name!r}"
                )
            total += tail
        return total

    def _checked(self, j: int, r: int) -> float:
        value = self.level_epsilon(j, r)
        real = isinstance(value, Real) and not isinstance(value, bool)
        eps = float(value) if real else math.nan
        if not (math.isfinite(eps) and eps >= 0):
            raise ConfigError(
                f"`level_epsilon` at (j={j}, r={r}) ({_show(value)}) must be a finite number "
                f">= 0; fix schedule {self.name!r}"
            )
        return eps


def paper_schedule(d: int, epsilon: float) -> Schedule:
    """The per-level budgets of He–Vershynin–Zhu: eq. 5.3 for d ≥ 2, eq. 5.12 for d = 1.

    Parameters
    ----------
    d : int
        Dimension of the data domain, ≥ 1.
    epsilon : float
        Total privacy budget, finite and > 0.

    Returns
    -------
    Schedule
        Named ``"paper"``; replays history exactly when ``d == 1``.

    Raises
    ------
    ConfigError
        If ``d`` is not an integer ≥ 1 or ``epsilon`` is not a finite number > 0.

    Examples
    --------
    >>> round(paper_schedule(2, 1.0).params["C1"], 5)
    0.07955
    >>> round(paper_schedule(1, 1.0).level_epsilon(1, 0), 5)
    0.07599
    """
    d = _check_d(d)
    epsilon = _check_epsilon(epsilon)
    if d == 1:
        c = 3.0 / math.pi**2

        def eps_d1(j: int, r: int) -> float:
            j = _check_level("j", j, 1)
            _check_level("r", r, 0)
            return c * epsilon / (j + 1) ** 2

        def tail_d1(s: int, max_level: int) -> float:
            # Σ_{j > m} 1/(j+1)² = Σ_{k ≥ m+2} 1/k² = ψ'(m+2).
            return c * epsilon * _trigamma(float(max_level + 2))

        return Schedule(
            name="paper",
            d=1,
            epsilon=epsilon,
            level_epsilon=eps_d1,
            replays_history=True,
            params={"equation": "5.12", "c": c},
            tail_loss=tail_d1,
        )

    exponent = (1.0 - 1.0 / d) / 2.0
    alpha: float = 2.0**exponent  # float ** float is Any to the checker
    c1: float = (1.0 - 2.0**-exponent) / 2.0

    def eps_d(j: int, r: int) -> float:
        j = _check_level("j", j, 1)
        r = _check_level("r", r, 0)
        if r < j:
            return 0.0  # a cell of level j counts only records from time level j on
        share: float = 2.0 ** ((j - r) * exponent)
        return c1 * epsilon * share

    return Schedule(
        name="paper",
        d=d,
        epsilon=epsilon,
        level_epsilon=eps_d,
        replays_history=False,
        params={"equation": "5.3", "C1": c1, "alpha": alpha},
    )


def closed_form_path_loss(d: int, epsilon: float, s: int) -> float:
    """Closed form of the paper schedule's loss on one path for a record of time level ``s``.

    Parameters
    ----------
    d : int
        Dimension, ≥ 1.
    epsilon : float
        Total budget, finite and > 0.
    s : int
        Time level, ≥ 0.

    Returns
    -------
    float
        ``(ε/2)(1 − α^{−s})`` with ``α = 2^{(1−1/d)/2}`` for d ≥ 2; ``ε(1/2 − 3/π²)`` for d = 1.

    Examples
    --------
    >>> closed_form_path_loss(3, 2.0, 0)
    0.0
    >>> round(closed_form_path_loss(1, 1.0, 7), 6)
    0.196036
    """
    d = _check_d(d)
    epsilon = _check_epsilon(epsilon)
    s = _check_level("s", s, 0)
    if d == 1:
        return epsilon * (0.5 - 3.0 / math.pi**2)
    alpha = 2.0 ** ((1.0 - 1.0 / d) / 2.0)
    decay: float = alpha ** (-s)  # float ** float is Any to the checker
    return epsilon / 2.0 * (1.0 - decay)


def worst_case_loss(schedule: Schedule, max_level: int = MAX_LEVEL) -> tuple[float, int]:
    """Worst-case privacy loss of one replaced record (two root-to-leaf paths).

    Parameters
    ----------
    schedule : Schedule
        The per-level budgets.
    max_level : int
        Highest cell level (and time level) that can exist.

    Returns
    -------
    tuple[float, int]
        ``(2 · max_s path_loss(s), s)`` over ``s = 0..max_level``; the smallest maximising s.

    Raises
    ------
    ConfigError
        If some ε_{j,r} is negative or not finite.

    Examples
    --------
    >>> loss, s = worst_case_loss(paper_schedule(2, 1.0))
    >>> s, loss < 1.0
    (64, True)
    """
    max_level = _check_level("max_level", max_level, 0)
    best, best_s = -math.inf, 0
    for s in range(max_level + 1):
        loss = schedule.path_loss(s, max_level)
        if loss > best:
            best, best_s = loss, s
    return 2.0 * best, best_s


def check_budget(schedule: Schedule, max_level: int = MAX_LEVEL) -> float:
    """Refuse a schedule that spends more than its ε on one replaced record.

    Parameters
    ----------
    schedule : Schedule
        The per-level budgets.
    max_level : int
        Highest cell level (and time level) that can exist.

    Returns
    -------
    float
        The worst-case loss ``2 · sup_s path_loss(s)``, ≤ ``schedule.epsilon``.

    Raises
    ------
    BudgetExceededError
        If the worst-case loss exceeds ``schedule.epsilon`` (beyond 1e-12 relative rounding);
        the message names the time level, the total and the largest contributing cell level.
    ConfigError
        If some ε_{j,r} is negative or not finite; the message names (j, r).

    Examples
    --------
    >>> round(check_budget(paper_schedule(1, 1.0)), 4)
    0.3921
    """
    total, s = worst_case_loss(schedule, max_level)
    if total > schedule.epsilon * (1.0 + _BUDGET_RTOL):  # privacy: P1
        parts = schedule.contributions(s, max_level)
        shown_total, shown_eps = _fmt_pair(total, schedule.epsilon)
        if parts:
            j, share = max(parts, key=lambda p: p[1])
            culprit = f"cell level j={j} contributes {share:.6g} per path"
        else:
            culprit = "the levels above max_level contribute all of it"
        raise BudgetExceededError(
            f"schedule {schedule.name!r} spends ε={shown_total} on one replaced record "
            f"(two root-to-leaf paths) at time level s={s}, above epsilon={shown_eps}; "
            f"{culprit}. Lower the per-level epsilons or raise epsilon"
        )
    return total
