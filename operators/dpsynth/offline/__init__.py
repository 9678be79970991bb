"""Offline synthesis of one whole data set: PMM, PSMM and low-dimensional synthesis.

Layer: core. Dissertation Alg 4 (:mod:`~dpsynth.offline.pmm`), Alg 1–2
(:mod:`~dpsynth.offline.psmm`) and Alg 5–9 (:mod:`~dpsynth.offline.lowdim`), with the
corrections of docs/algorithms.md C.13; docs/offline.md and docs/privacy.md P7, P7b.
"""

from __future__ import annotations

from dpsynth.offline.lowdim import LowdimResult, lowdim_release, lowdim_synthesize
from dpsynth.offline.pmm import pmm_leaves, pmm_synthesize
from dpsynth.offline.psmm import PsmmResult, psmm_measure, psmm_synthesize

__all__ = [
    "LowdimResult", "PsmmResult", "lowdim_release", "lowdim_synthesize", "pmm_leaves",
    "pmm_synthesize", "psmm_measure", "psmm_synthesize",
]
