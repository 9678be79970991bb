"""Time levels and the tick grid (spec C.0, C.1; DESIGN §3 "Ticks")."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpsynth.clock import TickClock, level_of, level_start, step_records
from dpsynth.errors import ConfigError

EPSILONS = [1.0, 0.3, 0.1, 2.5, 4.0, 1 / 3]


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_level_start_is_exact_ceiling(epsilon: float) -> None:
    for j in range(40):
        exact = Fraction(2) ** j / Fraction(epsilon)
        t_j = level_start(j, epsilon)
        assert t_j - 1 < exact <= t_j


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_level_of_inverts_level_start(epsilon: float) -> None:
    for t in list(range(1, 300)) + [10**6, 2**40 + 3]:
        j = level_of(t, epsilon)
        if j == -1:
            assert t < level_start(0, epsilon)
        else:
            assert level_start(j, epsilon) <= t < level_start(j + 1, epsilon)


def test_large_epsilon_gives_empty_levels() -> None:
    # ε = 4: t_0 = t_1 = t_2 = 1, so levels 0 and 1 hold no record (C.1)
    clock = TickClock(epsilon=4.0, release_every=1)
    assert [clock.ticks_in_level(r) for r in range(4)] == [0, 0, 1, 2]


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("release_every", [1, 3, 7, 100])
def test_ticks_split_exactly_at_levels(epsilon: float, release_every: int) -> None:
    clock = TickClock(epsilon=epsilon, release_every=release_every)
    horizon = level_start(9, epsilon) + 5
    ends = clock.tick_ends(horizon)
    assert all(e % release_every == 0 or level_of(e + 1, epsilon) != level_of(e, epsilon)
               for e in ends)
    for r in range(8):
        lo, hi = level_start(r, epsilon), level_start(r + 1, epsilon)
        assert clock.ticks_in_level(r) == sum(lo <= e < hi for e in ends)
        assert clock.ticks_before_level(r) == sum(e < lo for e in ends)
        if hi > lo:  # the last tick of a non-empty level ends exactly at t_{r+1} − 1
            assert hi - 1 in ends


def test_tick_count_does_not_depend_on_data() -> None:
    # the grid is a function of (ε, release_every) only: no data argument exists
    a, b = TickClock(1.0, 10), TickClock(1.0, 10)
    assert [a.ticks_in_level(r) for r in range(20)] == [b.ticks_in_level(r) for r in range(20)]
    assert a.ticks_in_level(19) == math.ceil((2**20 - 2**19) / 10) + (1 if (2**20 - 1) % 10 else 0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        TickClock(epsilon=bad, release_every=1)


def test_bad_release_every_is_refused() -> None:
    with pytest.raises(ConfigError, match="release_every"):
        TickClock(epsilon=1.0, release_every=0)


@pytest.mark.parametrize("every", [1, 7, 500])
@pytest.mark.parametrize("growth", [0.0, 0.01, 0.1, 0.5, 1.0, 3.0])
def test_grown_steps_never_shrink_and_follow_the_growth(every: int, growth: float) -> None:
    """release_growth: every step N·2^k records, at most max(N, g·t), never smaller than the
    one before, and above g·t/2 once g·t ≥ N — so at most about 2/g releases per doubling of
    t — from t = 0 and after a tick marker ended a step early (a start off the grid)."""
    for start in (0, 1, every // 2 + 3):
        t, previous = start, every
        while t < 5_000 * every:
            size = step_records(t, every, growth)
            assert size % every == 0 and (size // every).bit_count() == 1
            assert size <= max(every, growth * t) and size >= previous
            if growth == 0:
                assert size == every
            elif growth * t >= every:
                assert size > growth * t / 2, (t, size)
            if growth in (0.01, 0.1, 0.5, 1.0) and start == 0:
                assert t % size == 0  # g = 1/m from 0: round counts
            t, previous = t + size, size
