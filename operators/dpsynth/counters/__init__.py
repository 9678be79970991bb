"""Private continual counters: the privacy core of dpsynth.

Layer: core. One module per paper algorithm, each a scalar class with the streaming verbs
``update(x)`` / ``value()``, plus the struct-of-arrays form used by the synthesizer:

- :mod:`~dpsynth.counters.binary` — Binary Mechanism (Chan–Shi–Song; docs/algorithms.md A.5.1, C.10)
- :mod:`~dpsynth.counters.sparse` — Sparse Counting (HVZ Alg 2 = diss. Alg 10)
- :mod:`~dpsynth.counters.inhomogeneous` — Inhomogeneous Sparse Counting (HVZ Alg 3 = diss. Alg 11)
- :mod:`~dpsynth.counters.level` — all cells of one tree level, advanced per tick
"""

from __future__ import annotations

from dpsynth.counters.binary import BinaryMechanism
from dpsynth.counters.inhomogeneous import InhomogeneousSparseCounter
from dpsynth.counters.level import LevelCounters
from dpsynth.counters.sparse import SparseCounter

__all__ = ["BinaryMechanism", "InhomogeneousSparseCounter", "LevelCounters", "SparseCounter"]
