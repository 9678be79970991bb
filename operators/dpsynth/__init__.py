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
``tree``               core     round-robin midpoint partition, Morton routing
``consistency``        core     non-negative consistent counts (diss. Alg 3, spec C.7)
``synthesizer``        core     OnlineSynthesizer (HVZ Alg 1): levels, releases, snapshots
``release``            core     Release (compact form) and public placement of points
``release_format``     core     releases as checked msgpack records
``state``              core     snapshots as checked bytes
``schema``             core     declared record domains ↔ [0,1]^d
``offline``            core     offline PMM (diss. Alg 4, corrected)
``eval``               adapter  W1 (exact, tree upper, sliced lower), range queries
``bench*``, ``cli``    adapter  benchmarks and the ``dpsynth`` command
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
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release
from dpsynth.schema import Column, Schema

__all__ = [
    "BinaryMechanism",
    "BudgetExceededError",
    "Column",
    "ConfigError",
    "DpsynthError",
    "InhomogeneousSparseCounter",
    "KeyedNoise",
    "LevelCounters",
    "OnlineSynthesizer",
    "Release",
    "Schedule",
    "Schema",
    "SparseCounter",
    "TickClock",
    "check_budget",
    "level_of",
    "level_start",
    "paper_schedule",
    "pmm_synthesize",
    "worst_case_loss",
]
__version__ = "0.1.0"
