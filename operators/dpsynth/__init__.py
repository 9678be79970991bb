"""dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu online synthesis).

Layers (DESIGN §2, docs/architecture.md); a module imports only from the layers below it, the
DP core never imports Kafka, Faust or the adapters, and its only source of randomness is
:mod:`dpsynth.noise` (all enforced in CI by import-linter and ruff):

=============================================  ================================================
layer (top to bottom)                          owns
=============================================  ================================================
``cli``                                        the ``dpsynth`` command, one module per group
``audit``                                      the neighbour audit of every entry point (P14)
``stream``                                     the Kafka worker (Faust, RocksDB, confluent-kafka)
``testing``                                    pytest plugin, broker launcher, recorded topics
``settings`` · ``client``                      settings model · consumer library, recordings
``eval`` · ``datasets`` · ``keys``             W1, range queries · demo streams · key loader
``online`` · ``tabular``                       continual synthesis of points (HVZ Alg 1 and the
                                               step-block mechanisms) · of tables (paper 003)
``offline``                                    PMM, PSMM, low-dimensional synthesis
``release``                                    ``Release``, placement, wire formats
``counters`` · ``accounting`` · ``bounding``   Binary Mechanism, Sparse Counting (Alg 2),
                                               Inhomogeneous Sparse Counting (Alg 3) · ε
                                               schedules, worst-case loss, composition ·
                                               per-user contribution bounds (P15)
``noise``                                      keyed ChaCha20 streams, exact discrete Laplace
leaves                                         ``errors``, ``schema``, ``clipping``,
                                               ``tree``, ``clock``, ``consistency``, ``state``
=============================================  ================================================
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
