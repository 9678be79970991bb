"""Time levels and ticks: the data-independent clock every counter and release follows.

Layer: core. Time t counts accepted records (1-based). Time level j starts at
t_j = ⌈2^j/ε⌉ (HVZ §3, dissertation §5.2.3; docs/algorithms.md C.0) and holds the records t_j ≤ t <
t_{j+1}; records before t_0 (only when ε < 1) belong to no level. Counters advance once per *tick*
(docs/design.md D3): a tick ends after every ``release_every`` records and at every level end
t_{j+1} − 1, so level boundaries split ticks exactly and the number of ticks in a level depends
only on (ε, release_every), never on the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpsynth.errors import ConfigError

#: Levels beyond this never start: t_64 ≥ 2^64/ε records.
MAX_LEVEL = 64


def _check_epsilon(epsilon: float) -> Fraction:
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ConfigError(f"epsilon ({epsilon!r}) must be a finite number > 0")
    return Fraction(epsilon)


def level_start(j: int, epsilon: float) -> int:
    """t_j = ⌈2^j/ε⌉, computed exactly from the float ε.

    >>> [level_start(j, 1.0) for j in range(5)], [level_start(j, 4.0) for j in range(4)]
    ([1, 2, 4, 8, 16], [1, 1, 1, 2])
    """
    if j < 0:
        raise ConfigError(f"level j ({j}) must be >= 0")
    return math.ceil(Fraction(2) ** j / _check_epsilon(epsilon))


def level_of(t: int, epsilon: float) -> int:
    """The time level of record t: max{j : t_j ≤ t}, or −1 when t < t_0.

    >>> [level_of(t, 1.0) for t in (1, 2, 3, 4, 7, 8)], level_of(1, 4.0), level_of(3, 0.25)
    ([0, 1, 1, 2, 2, 3], 2, -1)
    """
    eps = _check_epsilon(epsilon)
    if t < math.ceil(1 / eps):
        return -1
    # t ≥ ⌈2^j/ε⌉ ⟺ t ≥ 2^j/ε (t integer) ⟺ 2^j ≤ tε
    tv = t * eps
    j = max(tv.numerator // tv.denominator, 1).bit_length() - 1
    while Fraction(2) ** (j + 1) <= tv:
        j += 1
    while j >= 0 and Fraction(2) ** j > tv:
        j -= 1
    return j


def step_records(t: int, release_every: int, release_growth: float = 0.0) -> int:
    """Records in the step that starts after ``t`` records (replacement's ``extend``).

    ``release_every`` N, alone (``release_growth`` 0), gives steps of N records. With a growth
    g > 0 a step holds N·2^k records, the largest such that N·2^k ≤ max(N, g·t): so a release
    costs O(its cells) only every ≈ g·t records. A function of public values only (t is public
    under replacement; P11), and of the step's start alone, so a step ended early by a tick
    marker does not change the sizes after it. From t = 0 and with g = 1/m (m an integer) the
    steps fall on multiples of their size.

    >>> [step_records(t, 100, 0.0) for t in (0, 100, 10_000)]
    [100, 100, 100]
    >>> [step_records(t, 100, 0.25) for t in (700, 800, 1_000, 1_200, 1_600, 2_000, 3_200)]
    [100, 200, 200, 200, 400, 400, 800]

    A step never shrinks: the size grows with t.
    """
    size = release_every
    if release_growth > 0:
        while 2 * size <= release_growth * t:
            size *= 2
    return size


def _multiples_in(lo: int, hi: int, step: int) -> int:
    """Number of multiples of ``step`` in [lo, hi] (0 if hi < lo)."""
    return 0 if hi < lo else hi // step - (lo - 1) // step


@dataclass(frozen=True)
class TickClock:
    """The tick grid of one run: ticks end every ``release_every`` records and at level ends.

    Parameters
    ----------
    epsilon
        Global ε: fixes the level starts t_j = ⌈2^j/ε⌉.
    release_every
        N: a tick (and a release) ends after every N records.

    Examples
    --------
    >>> clock = TickClock(epsilon=1.0, release_every=3)
    >>> [clock.ticks_in_level(r) for r in range(5)]   # levels [1,2), [2,4), [4,8), [8,16), [16,32)
    [1, 1, 2, 3, 6]
    >>> clock.tick_ends(10)
    [1, 3, 6, 7, 9]
    """

    epsilon: float
    release_every: int

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        if not isinstance(self.release_every, int) or self.release_every < 1:
            raise ConfigError(f"release_every ({self.release_every!r}) must be an integer >= 1")

    def level_start(self, j: int) -> int:
        """t_j of this clock."""
        return level_start(j, self.epsilon)

    def ticks_in_level(self, r: int) -> int:
        """T_r: ticks ending inside time level r (0 for an empty level, C.1)."""
        lo, hi = self.level_start(r), self.level_start(r + 1) - 1
        if hi < lo:
            return 0
        return _multiples_in(lo, hi - 1, self.release_every) + 1

    def ticks_before_level(self, r: int) -> int:
        """Global index of the first tick of level r: the ticks ending before t_r."""
        hi = self.level_start(r) - 1
        level_ends = {self.level_start(j) - 1 for j in range(r + 1)}
        extra = sum(1 for e in level_ends if 1 <= e <= hi and e % self.release_every)
        return _multiples_in(1, hi, self.release_every) + extra

    def tick_ends(self, t: int) -> list[int]:
        """Record counts at which ticks end, up to and including t (for tests and docs)."""
        ends = set(range(self.release_every, t + 1, self.release_every))
        j = 0
        while self.level_start(j) - 1 <= t and j <= MAX_LEVEL:
            ends.add(self.level_start(j) - 1)
            j += 1
        return sorted(e for e in ends if e >= 1)
