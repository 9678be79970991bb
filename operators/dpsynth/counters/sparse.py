"""Sparse Counting with a finite horizon: HVZ Alg 2 (= dissertation Alg 10), on ticks.

Layer: core. Notation of HVZ Alg 2: T = horizon (ticks), T0 = 9·ln(T)/ε the partition threshold,
j = segment, N_j = open-segment count, T̃_j = T0 + λ_j the noisy threshold, λ'_t the fresh check
noise, Ñ the output (latest Binary Mechanism value over closed segments).

Reading fixed here (docs/algorithms.md C.5, C.6; docs/design.md D3):

* the threshold test runs at check times τ = 0 … T−1 (C.6: ``t < T``); the test at τ sees the
  inputs of ticks 1 … τ of the open segment; the output of tick τ is emitted *before* the test at
  τ, so a closure shows from tick τ+1 on (C.5);
* a closure starts a new segment tested again at the same τ with fresh noise (Alg 2 verbatim);
  at most 14 closures per check time and at most T closures in all (the Binary Mechanism's
  horizon); both caps are functions of public outputs only and are never reached in practice;
* inputs are non-negative integers per tick; with one record per tick this is Alg 2 verbatim.

Lazy evaluation (docs/design.md D4): the test at a check time fires
with probability q(N) = P(λ' ≥ k), k = ⌊T0⌋ + λ_j − N_j + 1, independently of every other test.
We simulate these tests by *thinning*: fix a window N ≤ W (W = N + max(1, ⌊T0⌋+λ_j−N−12σ),
draw candidate check times as a Bernoulli(q(W)) process (geometric gaps, q(W) ≥ q(N) for every
N ≤ W), and accept a candidate at time τ with probability q(N_τ)/q(W). Each check then fires
with probability exactly q(N_τ), independently. The next candidate is drawn once and stored;
it is redrawn only when the open count leaves its window, a candidate is rejected or a segment
closes — so a cell far below its threshold costs nothing per tick even when it is touched.
``lazy=False`` draws every λ'_τ instead: the direct reference.

Noise addresses (shared with :mod:`dpsynth.counters.level`), c = closures so far at τ:
threshold ``(ctx+("thr",), stream, j)``; candidate drawn from time τ ``(ctx+("fire",), stream,
16·τ + c)``; acceptance of the candidate at τ ``(ctx+("accept",), …, 16·τ + c)``; candidate
redrawn after a rejection at τ ``(ctx+("refire",), …, 16·τ + c)``; direct check
``(ctx+("check",), …, 16·τ + c)``; Binary Mechanism ``ctx+("bm",)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import numpy as np

from dpsynth._types import Counts
from dpsynth.counters.binary import BinaryMechanism
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise, laplace_tail

#: Sentinel firing time: the test never fires within the horizon.
NEVER = np.iinfo(np.int64).max
#: Closures per check time are capped (a public, data-independent cap; C.6).
MAX_CLOSURES_PER_CHECK = 14
#: Event slot reserved for the firing-time draw that resumes after the cap.
_RESUME_SLOT = 15


def sparse_threshold(epsilon: float, horizon: int) -> float:
    """T0 = 9·ln(T)/ε (natural log, docs/algorithms.md A.5.2); 0 for T = 1."""
    return 9.0 * math.log(horizon) / epsilon


@overload
def check_event(time: int, closures: int) -> int: ...
@overload
def check_event(time: int, closures: Counts) -> Counts: ...
def check_event(time: int, closures: int | Counts) -> int | Counts:
    """Event of the check (or firing-time draw) at check time ``time`` after ``closures``."""
    return time * 16 + closures


#: The candidate window stops this many noise scales below the threshold: a candidate then
#: occurs with probability ≈ e^-12 ≈ 6·10^-6 per check, so even 2^20 idle cells cost a few
#: candidate checks per tick, while a touched cell far below its threshold draws nothing.
WINDOW_MARGIN_SCALES = 12


def window_top(open_count: Counts, noisy_threshold: Counts, scale: float) -> Counts:
    """W = N + max(1, ⌊T0⌋ + λ_j − N − ⌈12·scale⌉): the open counts one candidate process covers."""
    margin = math.ceil(WINDOW_MARGIN_SCALES * scale)
    top: Counts = open_count + np.maximum(1, noisy_threshold - open_count - margin)
    return top


def fire_probability(scale: float, noisy_threshold: np.ndarray, count: np.ndarray) -> np.ndarray:
    """q(N) = P(Lap_Z(scale) ≥ ⌊T0⌋ + λ_j − N + 1): the chance that one test fires."""
    return laplace_tail(scale, noisy_threshold - count + 1)


class SparseCounter:
    """Continual counter for sparse streams: HVZ Alg 2 (= dissertation Alg 10).

    Opens a new segment only when a noisy threshold test fires, so the inner Binary Mechanism sees
    few inputs: error O((log T + log^1.5 n)/ε) with n the number of non-zero ticks (Lemma 5.6).

    Privacy: ε-DP for a change of one tick's input by ±1 (replacement of one record changes two
    cells' inputs by 1 each, accounted by the caller): the threshold and check noise Lap_Z(2/ε)
    form the sparse-vector part (ε/2), the Binary Mechanism runs at ε/2 (docs/algorithms.md A.5.2).

    Parameters
    ----------
    epsilon
        Budget ε of this counter.
    horizon
        T: number of ticks; fixes T0 = 9·ln(T)/ε.
    noise, context, stream
        Source of all draws (addresses in the module docstring).
    lazy
        Draw the first firing check time once per (segment, count) instead of a fresh λ'_τ at
        every check. Both give the same output distribution.

    Examples
    --------
    >>> a, b = (SparseCounter(1.0, 64, KeyedNoise(bytes(32)), ("doc",)) for _ in range(2))
    >>> for _ in range(64):
    ...     a.update(1); b.update(1)
    >>> a.value() == b.value()   # same key and context: same noise, byte for byte
    True
    """

    def __init__(
        self,
        epsilon: float,
        horizon: int,
        noise: KeyedNoise,
        context: Sequence[int | str],
        stream: int = 0,
        *,
        lazy: bool = True,
    ) -> None:
        if not (epsilon > 0 and horizon >= 1):
            raise ConfigError(f"epsilon ({epsilon}) must be > 0 and horizon ({horizon}) >= 1")
        self.epsilon = float(epsilon)
        self.horizon = int(horizon)
        self.threshold = sparse_threshold(self.epsilon, self.horizon)  # T0
        self.scale = 2.0 / self.epsilon  # Lap_Z(2/ε) for λ_j and λ'_t; privacy: P3
        self.lazy = lazy
        self._noise = noise
        self._context = tuple(context)
        self._stream = int(stream)
        self._bm = BinaryMechanism(self.epsilon / 2, self.horizon, noise, self._context, stream)
        self.tick = 0  # ticks consumed; the next check time is self.tick
        self.segment = 0  # closed segments
        self.open_count = 0  # N_j
        self._noisy_threshold = self._draw_threshold()  # ⌊T0⌋ + λ_j
        self._closures_now = 0  # closures at the current check time
        self._fire_at = NEVER  # next candidate check time (lazy)
        self._window = 0  # W: open counts covered by the candidate process (lazy)
        if self.lazy:
            self._schedule(0)
        self._value = 0

    # -- noise ---------------------------------------------------------------------------

    def _draw(self, purpose: str, event: int, scale: float | None = None) -> int:
        draw = self._noise.discrete_laplace_at(
            self.scale if scale is None else scale,
            (*self._context, purpose),
            self._stream,
            event,
        )
        return int(draw[0])

    def _draw_threshold(self) -> int:
        return math.floor(self.threshold) + self._draw("thr", self.segment)

    def _schedule(self, time: int, event: int | None = None, purpose: str = "fire") -> None:
        """Lazy: new window from the current count; first candidate check time ≥ ``time``."""
        if time >= self.horizon or self.segment >= self.horizon:
            self._fire_at = NEVER
            return
        thr = np.array([self._noisy_threshold])
        self._window = int(window_top(np.array([self.open_count]), thr, self.scale)[0])
        q_window = fire_probability(self.scale, thr, np.array([self._window]))
        gap = self._noise.geometric_at(
            q_window,
            (*self._context, purpose),
            self._stream,
            check_event(time, self._closures_now) if event is None else event,
        )[0]
        fire = time + int(gap)
        self._fire_at = fire if fire < self.horizon else NEVER

    def _accept(self, time: int) -> bool:
        """Thinning: a candidate at ``time`` fires with probability q(N)/q(W)."""
        thr = np.array([self._noisy_threshold])
        q_now = fire_probability(self.scale, thr, np.array([self.open_count]))[0]
        q_window = fire_probability(self.scale, thr, np.array([self._window]))[0]
        u = self._noise.uniform_at(
            (*self._context, "accept"), self._stream, check_event(time, self._closures_now)
        )[0]
        if u * q_window <= q_now:
            return True
        self._schedule(time + 1, check_event(time, self._closures_now), "refire")
        return False

    # -- the check at one time -----------------------------------------------------------

    def _fires(self, time: int) -> bool:
        if self.segment >= self.horizon or self._closures_now >= MAX_CLOSURES_PER_CHECK:
            return False
        if self.lazy:
            return self._fire_at == time and self._accept(time)
        check = self._draw("check", check_event(time, self._closures_now))
        return self.open_count + check > self._noisy_threshold

    def _run_checks(self, time: int) -> None:
        self._closures_now = 0
        while self._fires(time):
            self._bm.update(self.open_count)
            self.segment += 1
            self.open_count = 0
            self._noisy_threshold = self._draw_threshold()
            self._closures_now += 1
            if self.lazy:
                self._schedule(time)
        if self.lazy and self._fire_at == time:  # cap reached: go on testing from time + 1
            self._schedule(time + 1, check_event(time, _RESUME_SLOT))

    # -- streaming verbs -----------------------------------------------------------------

    def update(self, x: int) -> None:
        """Advance one tick with the non-negative integer increment ``x``."""
        if self.tick >= self.horizon:
            raise ValueError(f"horizon ({self.horizon}) exhausted")
        if x < 0:
            raise ValueError("increments must be non-negative")
        self._run_checks(self.tick)  # the test at τ = tick − 1 runs before tick's input (C.5)
        self.tick += 1
        self.open_count += int(x)
        if self.lazy and self.open_count > self._window:  # left the window: new candidates
            self._closures_now = 0
            self._schedule(self.tick)
        self._value = self._bm.value()

    def value(self) -> int:
        """Ñ after the last tick: the private total of the closed segments."""
        return self._value

    @property
    def true_total(self) -> int:
        """Exact sum of all inputs so far (closed and open segments); never released."""
        return self._bm.true_total + self.open_count
