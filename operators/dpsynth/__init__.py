"""dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu online synthesis).

Layers (DESIGN §2); the DP core never imports Kafka, Faust or the adapters, and its only source
of randomness is :mod:`dpsynth.noise` (both enforced in CI by import-linter and ruff):

=====================  =======  ==============================================================
module                 layer    owns
=====================  =======  ==============================================================
``noise``              core     keyed ChaCha20 streams; exact discrete Laplace; geometric
``clock``              core     time levels t_j = ⌈2^j/ε⌉ and the tick grid
``counters``           core     Binary Mechanism, Sparse Counting (Alg 2), Inhomogeneous Sparse
                                Counting (Alg 3), all cells of a tree level as arrays
``accounting``         core     ε schedules and the worst-case loss of one replaced record
``errors``             core     DpsynthError and its subclasses
``bench``, ``cli``     adapter  benchmarks and the ``dpsynth`` command
=====================  =======  ==============================================================
"""

from __future__ import annotations

from dpsynth.accounting import Schedule, check_budget, paper_schedule, worst_case_loss
from dpsynth.clock import TickClock, level_of, level_start
from dpsynth.counters import (
    BinaryMechanism,
    InhomogeneousSparseCounter,
    LevelCounters,
    SparseCounter,
)
from dpsynth.errors import BudgetExceededError, ConfigError, DpsynthError
from dpsynth.noise import KeyedNoise

__all__ = [
    "BinaryMechanism",
    "BudgetExceededError",
    "ConfigError",
    "DpsynthError",
    "InhomogeneousSparseCounter",
    "KeyedNoise",
    "LevelCounters",
    "Schedule",
    "SparseCounter",
    "TickClock",
    "check_budget",
    "level_of",
    "level_start",
    "paper_schedule",
    "worst_case_loss",
]
__version__ = "0.1.0"
