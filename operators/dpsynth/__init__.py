"""dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu online synthesis).

Layers (docs/design.md D1, docs/architecture.md); a module imports only from the layers below it,
the DP core never imports Kafka, Faust or the adapters, and its only source of randomness is
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

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: The public API (docs/api.md): name → the module that defines it. Imported on first use, so
#: ``import dpsynth`` (and ``dpsynth --version``) costs no NumPy or Numba. The building blocks
#: (counters, noise, schedules, the tree) are public in their own packages.
_PUBLIC = {
    "OnlineSynthesizer": "dpsynth.online.synthesizer",
    "TabularSynthesizer": "dpsynth.tabular.synthesizer",
    "Synthesizer": "dpsynth.contract",
    "feed": "dpsynth.contract",
    "Release": "dpsynth.release",
    "TabularRelease": "dpsynth.release",
    "Schema": "dpsynth.schema",
    "Column": "dpsynth.schema",
    "Domain": "dpsynth.tabular.domain",
    "pmm_synthesize": "dpsynth.offline.pmm",
    "psmm_synthesize": "dpsynth.offline.psmm",
    "lowdim_synthesize": "dpsynth.offline.lowdim",
    "Neighbours": "dpsynth.params",
    "PrivacyUnit": "dpsynth.params",
    "MechanismName": "dpsynth.params",
    "DpsynthError": "dpsynth.errors",
    "ConfigError": "dpsynth.errors",
    "SchemaError": "dpsynth.errors",
    "BudgetExceededError": "dpsynth.errors",
    "StateCorruptError": "dpsynth.errors",
}
__all__ = [
    "BudgetExceededError",
    "Column",
    "ConfigError",
    "Domain",
    "DpsynthError",
    "MechanismName",
    "Neighbours",
    "OnlineSynthesizer",
    "PrivacyUnit",
    "Release",
    "Schema",
    "SchemaError",
    "StateCorruptError",
    "Synthesizer",
    "TabularRelease",
    "TabularSynthesizer",
    "feed",
    "lowdim_synthesize",
    "pmm_synthesize",
    "psmm_synthesize",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports lazily
    from dpsynth.contract import Synthesizer, feed
    from dpsynth.errors import (
        BudgetExceededError,
        ConfigError,
        DpsynthError,
        SchemaError,
        StateCorruptError,
    )
    from dpsynth.offline.lowdim import lowdim_synthesize
    from dpsynth.offline.pmm import pmm_synthesize
    from dpsynth.offline.psmm import psmm_synthesize
    from dpsynth.online.synthesizer import OnlineSynthesizer
    from dpsynth.params import MechanismName, Neighbours, PrivacyUnit
    from dpsynth.release import Release, TabularRelease
    from dpsynth.schema import Column, Schema
    from dpsynth.tabular.domain import Domain
    from dpsynth.tabular.synthesizer import TabularSynthesizer


if not TYPE_CHECKING:  # hidden from checkers, which would read any other name as Any

    def __getattr__(name: str) -> Any:
        module = _PUBLIC.get(name)
        if module is None:
            raise AttributeError(f"module 'dpsynth' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
