"""Composition of mechanisms: select–measure–fit step budgets and summed Laplace losses.

Layer: core. Paper 003's per-step split (ε/(2k) per selection and per measurement, Thm 6.1) with
a run-time ledger, and basic composition of parts given by their sensitivities and scales
(offline PSMM and low-dimensional synthesis, docs/privacy.md P7b). Every check raises
:class:`~dpsynth.errors.BudgetExceededError` above ε.
"""

from __future__ import annotations

import math
from numbers import Real

from dpsynth.accounting._checks import (
    _BUDGET_RTOL,
    _check_epsilon,
    _check_level,
    _fmt_pair,
    _show,
)
from dpsynth.errors import BudgetExceededError, ConfigError

__all__ = [
    "StepLedger", "check_composition", "check_select_measure_budget", "laplace_loss",
    "select_measure_loss", "select_measure_split", "split_budget",
]


# ---- select–measure–fit on tabular streams (paper 003 Alg 2/3, Thm 6.1; issue 7) ----------


def select_measure_split(epsilon: float, k: int, size_epsilon: float = 0.0,
                         selection_share: float = 0.5) -> tuple[float, float]:
    """Per-call budgets of paper 003 Alg 3: what the size counter ``size_epsilon`` = ε_n leaves,
    ``selection_share`` of it on the k EM selections and the rest on the k counters (or Laplace
    measurements) — the paper's ``((ε−ε_n)/(2k), (ε−ε_n)/(2k))`` at share 1/2. Share 0 is a
    public selection (the cyclic schedule, docs/tabular.md T18) that reads no data: every
    counter gets (ε−ε_n)/k. ε_n = 0 under replacement, where the count is public.

    >>> select_measure_split(1.0, 4)
    (0.125, 0.125)
    >>> select_measure_split(1.0, 1, 0.2)
    (0.4, 0.4)
    >>> select_measure_split(1.0, 4, 0.2, selection_share=0.0)
    (0.0, 0.2)
    """
    epsilon = _check_epsilon(epsilon)
    k = _check_level("k", k, 1)
    if not (isinstance(size_epsilon, Real) and 0.0 <= float(size_epsilon) < epsilon):
        raise ConfigError(f"`size_epsilon` ({_show(size_epsilon)}) must lie in [0, epsilon)")
    if not (isinstance(selection_share, Real) and 0.0 <= float(selection_share) < 1.0):
        raise ConfigError(f"`selection_share` ({_show(selection_share)}) must lie in [0, 1)")
    return split_budget(epsilon, k, float(size_epsilon), float(selection_share))


def split_budget(epsilon: float, k: int, size_epsilon: float,
                 selection_share: float) -> tuple[float, float]:
    """:func:`select_measure_split` of arguments checked already (a finite ε > 0, an ``int``
    k ≥ 1, 0 ≤ ε_n < ε, a share in [0, 1): :class:`~dpsynth.tabular.config.TabularConfig`
    checked them): the split alone."""
    rest = epsilon - size_epsilon
    return rest * selection_share / k, rest * (1.0 - selection_share) / k


def check_select_measure_budget(
    epsilon: float, k: int, selection_epsilon: float, measurement_epsilon: float,
    size_epsilon: float = 0.0,
) -> float:
    """Refuse a select–measure split that can spend more than ε on one record of the stream.

    ``selection_epsilon`` may be 0 for a public selection (the cyclic schedule), which reads no
    data; every counter must have ``measurement_epsilon`` > 0.

    Neighbours (paper 003 Def 3.3): one unit change of the differential stream ∇f at one time τ.
    Only the step τ sees it: its k selections (exponential mechanism, each
    ``selection_epsilon``-DP) and at most k counter inputs — each counter is
    ``measurement_epsilon``-DP over its whole input stream, and a record enters only the counters
    selected at τ (selective counting, Thm 6.1). For the baseline (Alg 2) the k Laplace
    measurements at τ are the only others. Under add/remove the count is private and a
    continual counter of the step sizes (``size_epsilon``-DP over its whole input, one input
    per step) scales the model instead (docs/privacy.md P12). Basic composition: the
    whole-stream loss is ``size_epsilon + k · (selection_epsilon + measurement_epsilon)``,
    which must not exceed ε.

    Returns the loss; raises BudgetExceededError otherwise (privacy: P1 for issue 7).

    >>> check_select_measure_budget(1.0, 4, *select_measure_split(1.0, 4))
    1.0
    """
    epsilon = _check_epsilon(epsilon)
    k = _check_level("k", k, 1)
    if not (isinstance(measurement_epsilon, Real) and math.isfinite(float(measurement_epsilon))
            and float(measurement_epsilon) > 0):
        raise ConfigError(f"`measurement_epsilon` ({_show(measurement_epsilon)}) must be a "
                          "finite number > 0")
    if not (isinstance(selection_epsilon, Real) and math.isfinite(float(selection_epsilon))
            and float(selection_epsilon) >= 0):
        raise ConfigError(f"`selection_epsilon` ({_show(selection_epsilon)}) must be a finite "
                          "number >= 0 (0: a public selection)")
    if not (isinstance(size_epsilon, Real) and math.isfinite(float(size_epsilon))
            and float(size_epsilon) >= 0):
        raise ConfigError(f"`size_epsilon` ({_show(size_epsilon)}) must be a finite number >= 0")
    return select_measure_loss(epsilon, k, float(selection_epsilon), float(measurement_epsilon),
                               float(size_epsilon))


def select_measure_loss(epsilon: float, k: int, selection_epsilon: float,
                        measurement_epsilon: float, size_epsilon: float) -> float:
    """:func:`check_select_measure_budget` of arguments checked already (a finite ε > 0, an
    ``int`` k ≥ 1, finite budgets ≥ 0: :class:`~dpsynth.tabular.config.TabularConfig` checked
    them and computed the split): the loss check alone (privacy: P1, P12)."""
    loss = size_epsilon + k * (selection_epsilon + measurement_epsilon)
    if loss > epsilon * (1.0 + _BUDGET_RTOL):  # privacy: P12
        shown, eps = _fmt_pair(loss, epsilon)
        raise BudgetExceededError(
            f"select–measure split spends ε={shown} per record (the size counter, k={k} "
            f"selections and measurements at its step), above epsilon={eps}; use "
            "select_measure_split(ε, k, size_epsilon)"
        )
    return loss


class StepLedger:
    """Run-time enforcement of the per-step budget of paper 003 Alg 2/3 (privacy: P1, issue 7).

    Every EM selection and every counter input of the current step is charged before it runs;
    a charge that would take the step above ``epsilon`` raises BudgetExceededError, so no
    release can exceed it. :meth:`close` ends the step (event-level privacy: a record is seen
    only at its own step, so steps do not add up — see :func:`check_select_measure_budget`).

    >>> ledger = StepLedger(1.0)
    >>> ledger.charge("select", 0.5); ledger.charge("measure", 0.5); ledger.close()
    1.0
    """

    def __init__(self, epsilon: float) -> None:
        self._start(_check_epsilon(epsilon))

    @classmethod
    def of_checked(cls, epsilon: float) -> StepLedger:
        """The ledger of an ε checked already (a finite float > 0:
        :class:`~dpsynth.tabular.config.TabularConfig` checked it): no second check."""
        ledger = cls.__new__(cls)
        ledger._start(epsilon)
        return ledger

    def _start(self, epsilon: float) -> None:
        self.epsilon = epsilon
        self.spent = 0.0
        self.max_spent = 0.0
        self.steps = 0

    def charge(self, what: str, amount: float) -> None:
        """Charge ``amount`` for one mechanism call of the current step, or refuse it."""
        if self.spent + amount > self.epsilon * (1.0 + _BUDGET_RTOL):
            raise BudgetExceededError(
                f"step {self.steps + 1}: `{what}` would spend {self.spent + amount:.6g} "
                f"in one step, above epsilon={self.epsilon:.6g}; lower workloads_per_step's "
                "per-call budget (use select_measure_split)"
            )
        self.spent += amount

    def close(self) -> float:
        """End the step; return what it spent."""
        spent, self.spent = self.spent, 0.0
        self.max_spent = max(self.max_spent, spent)
        self.steps += 1
        return spent


# -- offline mechanisms (issue 6): Laplace losses and basic composition ---------------------------


def laplace_loss(sensitivities: list[float], scales: list[float]) -> float:
    """Privacy loss Σ_i Δ_i / s_i of independent Laplace noises (Lemma 2.5, inhomogeneous).

    ``Δ_i`` bounds how much query i can change between neighbours, ``s_i`` is its noise scale
    (pass the *effective* scale the sampler uses; :func:`dpsynth.noise.effective_scale`).

    >>> laplace_loss([1.0, 1.0], [2.0, 4.0])
    0.75
    """
    if len(sensitivities) != len(scales):
        raise ConfigError("`sensitivities` and `scales` must have the same length")
    for value in (*sensitivities, *scales):
        if not (isinstance(value, Real) and math.isfinite(float(value)) and float(value) >= 0):
            raise ConfigError(f"sensitivities and scales ({_show(value)}) must be finite, >= 0")
    if any(float(s) == 0 for s in scales):
        raise ConfigError("noise scales must be > 0")
    return math.fsum(float(a) / float(s) for a, s in zip(sensitivities, scales, strict=True))


def check_composition(parts: dict[str, float], epsilon: float, *, name: str) -> float:
    """Refuse a mechanism whose parts spend more than ε in total (Lemmas 2.3–2.4, composition).

    Parameters
    ----------
    parts
        Loss of each part (e.g. ``{"covariance": …, "mean": …, "synthesis": …}``), each
        computed from the scales actually used.
    epsilon
        The budget of the whole mechanism.
    name
        The mechanism, for the message.

    Returns
    -------
    float
        The total loss, ≤ ε (up to 1e-12 relative rounding).

    Raises
    ------
    BudgetExceededError
        Naming the total, ε and the largest part.

    Examples
    --------
    >>> check_composition({"a": 0.5, "b": 0.5}, 1.0, name="demo")
    1.0
    """
    epsilon = _check_epsilon(epsilon)
    for part, loss in parts.items():
        if not (isinstance(loss, Real) and math.isfinite(float(loss)) and float(loss) >= 0):
            raise ConfigError(f"loss of part {part!r} ({_show(loss)}) must be finite and >= 0")
    total = math.fsum(float(v) for v in parts.values())
    if total > epsilon * (1.0 + _BUDGET_RTOL):  # privacy: offline composition
        worst = max(parts, key=lambda p: parts[p])
        shown_total, shown_eps = _fmt_pair(total, epsilon)
        raise BudgetExceededError(
            f"{name} spends ε={shown_total} above epsilon={shown_eps}; part {worst!r} "
            f"spends {parts[worst]:.6g}. Raise the noise scales of that part or raise epsilon"
        )
    return total


__all__ += ["check_composition", "laplace_loss"]
