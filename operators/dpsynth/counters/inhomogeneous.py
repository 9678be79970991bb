"""Inhomogeneous Sparse Counting: HVZ Alg 3 (= dissertation Alg 11), on ticks.

Layer: core. Notation of HVZ Alg 3: r = time level, t_r = ⌈2^r/ε⌉ from the *global* ε, r0 the
starting level, ε_r the budget of level r, S̃ the noisy total of completed levels, c_t the output
of the level's Sparse Counter. Per level r (docs/algorithms.md A.5.3 table): Sparse Counting at
ε_r/2 (so its threshold and check noise are Lap_Z(4/ε_r), T0 = 18·ln(T_r)/ε_r, its Binary Mechanism
runs at ε_r/4), and at the level's end S̃ ← S̃ + Σ inputs + Lap_Z(2/ε_r). Output N_t = S̃ + c_t.

Choices (docs/algorithms.md C.1, C.2): data before t_{r0} is never counted; an empty level (t_r =
t_{r+1}, possible when ε > 1) gets no counter and no S̃ noise — it touches no data, so skipping it
is privacy-neutral. The horizon of level r is its number of ticks T_r (docs/design.md D3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dpsynth.clock import MAX_LEVEL, TickClock
from dpsynth.counters.sparse import SparseCounter
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise


def level_context(context: Sequence[int | str], r: int) -> tuple[int | str, ...]:
    """Context of everything level r of a counter draws (its Sparse Counter and S̃ update)."""
    return (*context, "level", r)


def level_end_scale(level_epsilon: float) -> float:
    """Scale of the S̃ update at a level's end: Lap_Z(2/ε_r)."""
    return 2.0 / level_epsilon


class InhomogeneousSparseCounter:
    """Continual counter over unbounded time with per-level budgets: HVZ Alg 3 (= diss. Alg 11).

    Privacy: a change of one tick's input by ±1 inside time level r ≥ r0 costs ε_r (Lemma 5.7):
    ε_r/2 for the level's Sparse Counter and ε_r/2 for the S̃ update; a change before t_{r0}
    costs nothing, because that data is never read.

    Parameters
    ----------
    level_epsilon
        r ↦ ε_r, the budget of time level r (e.g. ε_{j,r} of the cell's tree level j).
    start_level
        r0: the first time level counted.
    clock
        The run's tick grid (global ε and ``release_every``).
    noise, context, stream
        Source of all draws; level r uses ``level_context(context, r)``.
    first_tick
        Global index of the first tick passed to :meth:`update` (default: the first tick of the
        start level). Ticks before the start level are read and discarded.

    Examples
    --------
    >>> clock = TickClock(epsilon=1.0, release_every=1)
    >>> c = InhomogeneousSparseCounter(lambda r: 0.5, 0, clock, KeyedNoise(bytes(32)), ("doc",))
    >>> for _ in range(40):
    ...     c.update(1)
    >>> c.level, c.true_total
    (5, 40)
    """

    def __init__(
        self,
        level_epsilon: Callable[[int], float],
        start_level: int,
        clock: TickClock,
        noise: KeyedNoise,
        context: Sequence[int | str],
        stream: int = 0,
        *,
        first_tick: int | None = None,
    ) -> None:
        if start_level < 0:
            raise ConfigError(f"start_level ({start_level}) must be >= 0")
        self.level_epsilon = level_epsilon
        self.start_level = start_level
        self.clock = clock
        self._noise = noise
        self._context = tuple(context)
        self._stream = int(stream)
        self.tick = clock.ticks_before_level(start_level) if first_tick is None else first_tick
        self._skip = max(clock.ticks_before_level(start_level) - self.tick, 0)
        self.noisy_total = 0  # S̃
        self.true_total = 0  # exact, never released
        self.level = start_level - 1
        self._level_ticks = 0
        self._level_total = 0
        self._inner: SparseCounter | None = None
        self._value = 0
        self._next_level()

    def _next_level(self) -> None:
        self.level += 1
        while self.clock.ticks_in_level(self.level) == 0 and self.level < MAX_LEVEL:
            self.level += 1  # C.1: empty level, no counter and no noise
        eps_r = self.level_epsilon(self.level)
        if not eps_r > 0:
            raise ConfigError(f"level epsilon at time level r={self.level} ({eps_r}) must be > 0")
        self._level_ticks = 0
        self._level_total = 0
        self._inner = SparseCounter(
            eps_r / 2,
            self.clock.ticks_in_level(self.level),
            self._noise,
            level_context(self._context, self.level),
            self._stream,
        )

    def update(self, x: int) -> None:
        """Advance one global tick with the non-negative integer increment ``x``."""
        self.tick += 1
        if self._skip:
            self._skip -= 1  # before t_{r0}: never counted (C.2)
            return
        assert self._inner is not None
        self._inner.update(x)
        self._level_total += int(x)
        self.true_total += int(x)
        self._value = self.noisy_total + self._inner.value()
        self._level_ticks += 1
        if self._level_ticks == self._inner.horizon:
            eps_r = self.level_epsilon(self.level)
            end_noise = self._noise.discrete_laplace_at(
                level_end_scale(eps_r), (*level_context(self._context, self.level), "end"),
                self._stream, 0,
            )
            self.noisy_total += self._level_total + int(end_noise[0])  # privacy: P5
            self._next_level()

    def value(self) -> int:
        """N_t = S̃ + c_t after the last tick."""
        return self._value
