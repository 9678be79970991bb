"""Privacy accounting: ε schedules of the online tree, and composition of mechanisms.

Layer: core. :mod:`~dpsynth.accounting.schedules` — the HVZ schedules ε_{j,r} and the worst-case
loss of one replaced record, refused above ε before anything is released (docs/privacy.md P1);
:mod:`~dpsynth.accounting.composition` — select–measure–fit step budgets and summed losses;
:mod:`~dpsynth.accounting.units` — the privacy unit (record or user) and the user-level loss (P15).
"""

from __future__ import annotations

from dpsynth.accounting.composition import (
    StepLedger,
    check_composition,
    check_select_measure_budget,
    laplace_loss,
    select_measure_split,
)
from dpsynth.accounting.schedules import (
    MAX_LEVEL,
    Schedule,
    check_budget,
    closed_form_path_loss,
    paper_schedule,
    worst_case_loss,
)
from dpsynth.accounting.units import PRIVACY_UNITS, record_epsilon, user_level_loss

__all__ = [
    "MAX_LEVEL", "PRIVACY_UNITS", "Schedule", "StepLedger", "check_budget", "check_composition",
    "check_select_measure_budget", "closed_form_path_loss", "laplace_loss", "paper_schedule",
    "record_epsilon", "select_measure_split", "user_level_loss", "worst_case_loss",
]
