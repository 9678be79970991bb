"""Level form ≡ scalar forms: a LevelCounters of k cells releases exactly what k scalar
InhomogeneousSparseCounters with streams 0..k−1 and the same context release, tick by tick
(our analogue of river's update_many ≡ update_one), and work follows touched cells only.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.clock import TickClock
from dpsynth.counters import InhomogeneousSparseCounter, LevelCounters
from dpsynth.noise import KeyedNoise

KEY = bytes(range(32))

CASES = {
    # name: (global ε, release_every, tree level j, ε_{j,r} base, mean increment, ticks)
    "sparse_paper_like": (1.0, 5, 4, 0.3, 0.4, 400),
    "frequent_closures": (1.0, 1, 3, 8.0, 3.0, 600),  # many segments, several BM nodes
    "epsilon_4_empty_levels": (4.0, 2, 2, 2.0, 2.0, 300),  # t_0 = t_1 = t_2: empty levels
    "all_zero_stream": (1.0, 1, 2, 6.0, 0.0, 300),  # segments may close on noise alone
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_level_form_equals_scalar_counters(case: str) -> None:
    epsilon, release_every, j, base, mean, ticks = CASES[case]
    clock = TickClock(epsilon=epsilon, release_every=release_every)
    noise = KeyedNoise(KEY)

    def level_eps(r: int) -> float:
        return base * 2.0 ** ((j - r) / 4)

    n_cells = 8
    level = LevelCounters(n_cells, level_eps, j, clock, noise, ("cells", j))
    scalars = [
        InhomogeneousSparseCounter(level_eps, j, clock, noise, ("cells", j), stream=c)
        for c in range(n_cells)
    ]
    rng = np.random.default_rng(len(case))
    levels_seen = set()
    most_segments = 0
    for _ in range(ticks):
        increments = rng.poisson(mean, n_cells) * (rng.random(n_cells) < 0.6)
        level.update_dense(increments)
        for c, counter in enumerate(scalars):
            counter.update(int(increments[c]))
        expected = np.array([counter.value() for counter in scalars])
        np.testing.assert_array_equal(level.values(), expected)
        levels_seen.add(level.level)
        most_segments = max(most_segments, int(level.segment.min()))
    assert len(levels_seen) >= 3  # several level ends were crossed
    if case == "frequent_closures":
        assert most_segments >= 8


def test_untouched_cells_cost_nothing() -> None:
    """A tick draws nothing for touched cells far below their threshold (thinning windows) and
    only a handful of candidate checks across all idle cells, whatever the cell count."""

    class Counting(KeyedNoise):
        __slots__ = ("draws",)

        def __init__(self, key: bytes) -> None:
            super().__init__(key)
            self.draws = 0

        def geometric_at(self, p, context, streams, events):  # type: ignore[no-untyped-def]
            out = super().geometric_at(p, context, streams, events)
            self.draws += out.size
            return out

        def discrete_laplace_at(self, scale, context, streams, events):  # type: ignore[no-untyped-def]
            out = super().discrete_laplace_at(scale, context, streams, events)
            self.draws += out.size
            return out

    noise = Counting(KEY)
    clock = TickClock(epsilon=1.0, release_every=100)
    level = LevelCounters(2**16, lambda r: 0.05, 12, clock, noise, ("big",))
    assert noise.draws >= 2**16  # construction: a threshold and a firing time per cell
    rng = np.random.default_rng(0)
    for touched in (10, 100, 1000, 10_000):
        before = noise.draws
        cells = rng.choice(2**16, touched, replace=False)
        level.update(cells, np.ones(touched, np.int64))
        assert noise.draws - before <= 5
