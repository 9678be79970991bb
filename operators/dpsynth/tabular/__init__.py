"""Tabular streams (issue 7): paper 003's select–measure–fit synthesizer over a finite domain.

Layer: core (no Kafka, no weak randomness). Modules: :mod:`~dpsynth.tabular.domain` (domain and
record codec), :mod:`~dpsynth.tabular.counters` (Simple, Block, unbounded Block),
:mod:`~dpsynth.tabular.selection` (exponential mechanism), :mod:`~dpsynth.tabular.model` (MW
fit), :mod:`~dpsynth.tabular.synthesizer` (Alg 3 and the Alg 2 baseline),
:mod:`~dpsynth.release.tabular_v1` (release and wire format), :mod:`~dpsynth.tabular.metrics`.
"""

from __future__ import annotations

from dpsynth.release import TabularRelease, decode_tabular_release, encode_tabular_release
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

__all__ = [
    "Domain",
    "TabularRelease",
    "TabularSynthesizer",
    "decode_tabular_release",
    "encode_tabular_release",
]
