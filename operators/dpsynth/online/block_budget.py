"""Budgets of the step blocks: how ε is split per block and the worst case it allows (P9).

Layer: core. See :mod:`dpsynth.online.blocks` for the mechanisms these shares pay for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsynth.errors import BudgetExceededError, ConfigError
from dpsynth.params import PARAMS

NEIGHBOUR_NOTIONS = PARAMS["neighbours"].values
CURRENT_SHAPES = PARAMS["current_shape"].values
#: ``current_shape="steps"``: the share of each block's budget spent on its step summaries, and
#: the share of that spent on their split decisions (docs/decisions/0003).
STEP_SHARE = 0.4
STEP_STRUCTURE_SHARE = 0.3
#: ``guided``: the share of each block's budget spent on its time nodes (docs/decisions/0003).
GUIDED_STEP_SHARE = 0.6
#: ``adaptive``: the share of what a block keeps (after sizes and steps) spent on PrivTree's
#: split decisions; ``guided`` chooses no structure privately.
ADAPTIVE_STRUCTURE_SHARE = 0.5


@dataclass(frozen=True)
class BlockBudget:
    """Per-block budgets and the worst-case loss of one neighbouring change (privacy: P9).

    ``size`` ε_n (open-block Binary Mechanism), ``structure`` ε_s (PrivTree decisions; 0 for
    ``guided``), ``counts`` ε_c (leaf counts; for ``guided`` the block's own summary),
    ``steps`` ε_o (the open block's step summaries; for ``guided`` its time nodes, split
    equally over their levels, and block 0's summary gets ε_c + ε_o).
    """

    neighbours: str
    epsilon: float
    size: float
    structure: float
    counts: float
    worst_case_loss: float
    steps: float = 0.0


def block_budget(
    epsilon: float,
    neighbours: str,
    *,
    size_share: float = 0.1,
    structure_share: float = 0.0,
    step_share: float = 0.0,
) -> BlockBudget:
    """Split ε per block and check the worst case: ≤ ε, or :class:`BudgetExceededError`.

    add/remove: one record lies in one step of one block and changes each of that block's
    mechanisms by one count: loss ε_n + ε_o + ε_s + ε_c. replace: a changed record stays in its
    step, so one block (and one step summary) sees a removal and an addition: loss
    2(ε_o + ε_s + ε_c), and ε_n = 0 (sizes public). ε_o = ``step_share`` of what ε_n leaves,
    ε_s = ``structure_share`` of what ε_o leaves.

    >>> b = block_budget(1.0, "add_remove", structure_share=0.5)
    >>> round(b.size, 3), round(b.structure, 3), round(b.counts, 3), round(b.worst_case_loss, 3)
    (0.1, 0.45, 0.45, 1.0)
    >>> block_budget(1.0, "replace", structure_share=0.5).worst_case_loss
    1.0
    """
    if neighbours not in NEIGHBOUR_NOTIONS:
        raise ConfigError(f"neighbours ({neighbours!r}) must be one of {NEIGHBOUR_NOTIONS}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"epsilon ({epsilon!r}) must be a finite number > 0")
    if not 0.0 < size_share < 1.0:
        raise ConfigError(f"size_share ({size_share!r}) must lie strictly between 0 and 1")
    for name, share in (("structure_share", structure_share), ("step_share", step_share)):
        if not 0.0 <= share < 1.0:
            raise ConfigError(f"{name} ({share!r}) must lie in [0, 1)")
    if neighbours == "add_remove":
        size = size_share * epsilon
        rest = epsilon - size
        changes = 1  # one count per mechanism
    else:
        size, rest, changes = 0.0, epsilon / 2, 2  # a removal and an addition in one block
    steps = step_share * rest
    rest -= steps
    structure = structure_share * rest
    counts = rest - structure
    loss = size + changes * (steps + structure + counts)  # privacy: P9 (basic composition)
    if loss > epsilon * (1 + 1e-12):
        raise BudgetExceededError(
            f"block budget spends {loss:.6g} > epsilon = {epsilon:.6g}; lower the shares"
        )
    return BlockBudget(neighbours, float(epsilon), size, structure, counts, loss, steps)
