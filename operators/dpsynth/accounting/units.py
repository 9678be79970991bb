"""The privacy unit: one record, or one user with at most k counted records (P15).

Layer: core. Under ``privacy_unit="user"`` the configured ε is the loss of one *user*: every
record of one user added or removed (or, under replacement, changed). Contribution bounding
(:mod:`dpsynth.bounding`) keeps at most k records per user and is stable — removing a user's
records changes no other record's fate — so two user-level neighbours become two streams that
differ in at most k records of that user, and the mechanism's per-record guarantee composes over
them (group privacy): loss ≤ k · (per-record loss). docs/privacy.md P15 proves it and shows
that for dpsynth's mechanisms no smaller bound holds in general, so the mechanisms are
calibrated per record at ε/k.

>>> record_epsilon(1.0, 4)
0.25
>>> user_level_loss(0.25, 4, epsilon=1.0)
1.0
"""

from __future__ import annotations

from dpsynth.accounting._checks import _BUDGET_RTOL, _check_epsilon, _check_level, _fmt_pair
from dpsynth.errors import BudgetExceededError
from dpsynth.params import PARAMS

#: ``privacy_unit`` values: a record (event-level), or a user (all of one user's records).
PRIVACY_UNITS = PARAMS["privacy_unit"].values

__all__ = ["PRIVACY_UNITS", "group_loss", "record_epsilon", "user_level_loss"]


def record_epsilon(epsilon: float, max_contributions: int) -> float:
    """The per-record budget ε/k that makes a user of at most k records cost ε (P15)."""
    epsilon = _check_epsilon(epsilon)
    k = _check_level("max_contributions", max_contributions, 1)
    return epsilon / k


def user_level_loss(record_loss: float, max_contributions: int, *, epsilon: float) -> float:
    """Worst-case loss of one user, k · (per-record loss); refused above ``epsilon``.

    ``record_loss`` is the mechanism's checked worst-case loss of one record (P1, P8, P9).

    Raises
    ------
    BudgetExceededError
        When k · record_loss exceeds ε, naming both and the fix.
    """
    epsilon = _check_epsilon(epsilon)
    return group_loss(record_loss, _check_level("max_contributions", max_contributions, 1),
                      epsilon)


def group_loss(record_loss: float, k: int, epsilon: float) -> float:
    """:func:`user_level_loss` of arguments checked already (an ``int`` k ≥ 1, a finite ε > 0:
    :class:`~dpsynth.online.config.OnlineConfig` checked them): the loss check alone."""
    loss = k * float(record_loss)  # privacy: P15 (group privacy over k bounded records)
    if loss > epsilon * (1 + _BUDGET_RTOL):
        shown, limit = _fmt_pair(loss, epsilon)
        raise BudgetExceededError(
            f"one user of max_contributions={k} records costs {shown} (k × the per-record loss "
            f"{float(record_loss):.6g}), above epsilon={limit}; calibrate the mechanism at "
            f"epsilon/k or lower max_contributions"
        )
    return loss
