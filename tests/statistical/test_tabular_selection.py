"""Exponential mechanism (issue 7): draws follow P(i) ∝ exp(ε u_i / 2Δ), larger error favoured.

Fixed key; 40000 draws at distinct event addresses; chi-square goodness of fit rejected at
p < 1e-6 (false alarm of a correct sampler: 1e-6 per test). Power: the printed sign of
Def 3.8 (favouring small u) is rejected.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsynth.noise import KeyedNoise
from dpsynth.tabular.selection import em_probabilities, exponential_mechanism

pytestmark = pytest.mark.statistical

DRAWS = 40_000


def test_em_frequencies_match_and_favour_large_scores():
    noise = KeyedNoise(bytes(range(32)))
    scores = np.array([0.0, 1.0, 2.0, 4.0, 3.0])
    p = em_probabilities(scores, 1.0, 1.0)
    counts = np.bincount([exponential_mechanism(scores, 1.0, 1.0, noise, ("em-stat",), 0, e)
                          for e in range(DRAWS)], minlength=scores.size)
    assert stats.chisquare(counts, DRAWS * p).pvalue > 1e-6
    assert int(np.argmax(counts)) == 3
    wrong = em_probabilities(-scores, 1.0, 1.0)  # Def 3.8 as printed
    assert stats.chisquare(counts, DRAWS * wrong).pvalue < 1e-6


def test_em_is_deterministic_per_address():
    noise = KeyedNoise(bytes(range(32)))
    scores = np.linspace(0, 3, 7)
    a = [exponential_mechanism(scores, 2.0, 0.25, noise, ("d",), 0, e) for e in range(50)]
    b = [exponential_mechanism(scores, 2.0, 0.25, KeyedNoise(bytes(range(32))), ("d",), 0, e)
         for e in range(50)]
    assert a == b and len(set(a)) > 1
