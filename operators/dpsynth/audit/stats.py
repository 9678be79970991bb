"""Empirical ε lower bounds from threshold tests, with Clopper–Pearson intervals (issue 13).

Layer: audit. A mechanism M is ε-DP only if, for every event E fixed *before* the outputs are
seen, P(M(D) ∈ E) ≤ e^ε · P(M(D′) ∈ E) for neighbours D, D′ (both ways). Given a statistic S of
the outputs on n keys per input, the audit tests events E = {S > τ} and {S ≤ τ} and reports

    ε̂ = ln( CP_lower(k_D, n) / CP_upper(k_D′, n) ),

the log ratio of a Clopper–Pearson lower bound for one side to an upper bound for the other,
maximised over the directions. *Statistical honesty*: the keys are split in two halves. The
event (threshold, side, direction) is chosen on the first half only — all thresholds between
observed values are tried there — and ε̂ is computed on the second half, so the event is fixed
before the data that judge it are seen, and the multiplicity of thresholds costs nothing. An
entry point's m tests (statistics × neighbour pairs) share the error rate α by Bonferroni: each
one-sided interval is at level α/(2m). Then, if the mechanism is ε-DP, P(any ε̂ > ε) ≤ α: every
reported ε̂ is a simultaneous (1 − α)-confidence lower bound on the true loss.

Power: with h = ⌊n/2⌋ evaluation keys, the largest certifiable bound (complete separation,
k_D = h, k_D′ = 0) is ln(a/(1 − a)) with a = (α/(2m))^(1/h) (:func:`max_certifiable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.stats import beta

#: Default family-wise error rate of one entry point's ε lower bounds (99 % confidence).
ALPHA = 0.01


@lru_cache(maxsize=65536)
def clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds (lower, upper) for k successes in n, each at ``level``.

    P(p < lower) ≤ level and P(p > upper) ≤ level, exactly (binomial tails inverted).

    >>> lo, hi = clopper_pearson(0, 50, 0.025)
    >>> lo, round(hi, 4)
    (0.0, 0.0711)
    """
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k ({k}) <= n ({n}) and n >= 1")
    lower = 0.0 if k == 0 else float(beta.ppf(level, k, n - k + 1))
    upper = 1.0 if k == n else float(beta.ppf(1.0 - level, k + 1, n - k))
    return lower, upper


def ratio_bound(k_high: int, k_low: int, n: int, level: float) -> float:
    """ln(CP_lower(k_high, n) / CP_upper(k_low, n)), at least 0 (one direction of one event)."""
    lower = clopper_pearson(k_high, n, level)[0]
    upper = clopper_pearson(k_low, n, level)[1]
    if lower <= 0.0:
        return 0.0
    return max(math.log(lower / upper), 0.0)


def max_certifiable(keys: int, tests: int, alpha: float = ALPHA) -> float:
    """The largest ε̂ the held-out procedure can report with ``keys`` keys and ``tests`` tests.

    >>> round(max_certifiable(100, 15), 2)
    1.75
    """
    level = alpha / (2 * tests)
    a = level ** (1.0 / (keys - keys // 2))
    return math.log(a / (1.0 - a))


@dataclass(frozen=True)
class Event:
    """A threshold event chosen on the selection half: S > τ (``above``) or S ≤ τ, more
    frequent on input ``high`` ("D" or "D′")."""

    threshold: float
    above: bool
    high: str

    def count(self, values: np.ndarray) -> int:
        """How many values fall in the event."""
        hits = values > self.threshold if self.above else values <= self.threshold
        return int(np.count_nonzero(hits))

    def describe(self, statistic: str) -> str:
        """E.g. ``mass@last > 2.5 on D′``."""
        return f"{statistic} {'>' if self.above else '<='} {self.threshold:g} on {self.high}"


@dataclass(frozen=True)
class Bound:
    """The held-out ε lower bound of one statistic on one neighbour pair."""

    statistic: str
    pair: str
    epsilon: float
    event: Event | None
    hits: tuple[int, int]  # (k_high, k_low) on the evaluation half
    keys: int  # evaluation keys

    def describe(self) -> str:
        """One line for reports."""
        if self.event is None:
            return f"{self.pair}: {self.statistic} never separates the inputs"
        return (f"{self.pair}: {self.event.describe(self.statistic)} "
                f"({self.hits[0]}/{self.keys} vs {self.hits[1]}/{self.keys}) → "
                f"ε ≥ {self.epsilon:.3f}")


def _best_event(a: np.ndarray, b: np.ndarray, level: float) -> Event | None:
    """The event that maximises the CP bound on the selection half (None: no separation)."""
    pooled = np.unique(np.concatenate([a, b]))
    if pooled.size < 2:
        return None
    thresholds = (pooled[:-1] + pooled[1:]) / 2
    n = a.size
    best, best_event = 0.0, None
    a_sorted, b_sorted = np.sort(a), np.sort(b)
    below_a = np.searchsorted(a_sorted, thresholds, side="right")  # values <= τ
    below_b = np.searchsorted(b_sorted, thresholds, side="right")
    for i, tau in enumerate(thresholds.tolist()):
        for above, ka, kb in ((True, n - below_a[i], n - below_b[i]),
                              (False, below_a[i], below_b[i])):
            for high, k_high, k_low in (("D", ka, kb), ("D′", kb, ka)):
                if k_high <= k_low:
                    continue
                score = ratio_bound(int(k_high), int(k_low), n, level)
                # ties: prefer the larger raw gap (more power on the evaluation half)
                score += 1e-9 * (k_high - k_low)
                if score > best:
                    best, best_event = score, Event(float(tau), above, high)
    return best_event


def held_out_bound(statistic: str, pair: str, on_d: np.ndarray, on_neighbour: np.ndarray,
                   tests: int, alpha: float = ALPHA) -> Bound:
    """ε lower bound of ``statistic`` for one pair: event chosen on the first half of the keys,
    judged on the second at level α/(2·tests) per one-sided interval.

    ``on_d[i]`` and ``on_neighbour[i]`` are the statistic under key i on D and on D′.
    """
    a, b = np.asarray(on_d, np.float64), np.asarray(on_neighbour, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError("need one value per key on each input, at least two keys")
    half = a.size // 2
    level = alpha / (2 * tests)
    event = _best_event(a[:half], b[:half], level)
    keys = a.size - half
    if event is None:
        return Bound(statistic, pair, 0.0, None, (0, 0), keys)
    sides = {"D": a[half:], "D′": b[half:]}
    k_high = event.count(sides[event.high])
    k_low = event.count(sides["D′" if event.high == "D" else "D"])
    epsilon = ratio_bound(k_high, k_low, keys, level)
    return Bound(statistic, pair, epsilon, event, (k_high, k_low), keys)
