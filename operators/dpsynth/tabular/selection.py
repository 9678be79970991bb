"""Workload selection: the exponential mechanism (paper 003 Def 3.8, sign erratum fixed) and the
public cyclic schedule (docs/tabular.md T2, T18).

Layer: core. docs/algorithms.md S.2.2: Def 3.8 prints ``exp(−ε u / 2Δ)``, but Thm 3.10 and Algs 2–3
need the mechanism to favour *large* error; we sample ``P(i) ∝ exp(ε · u_i / (2Δ))``
(McSherry–Talwar): ε-DP when every utility changes by at most Δ between neighbours. The draw is an
inverse-CDF lookup of one uniform from :meth:`KeyedNoise.uniform_at` at a caller-given address, so
the choice is a deterministic function of (key, context, scores).

>>> from dpsynth.noise import KeyedNoise
>>> exponential_mechanism(np.array([0.0, 50.0, 1.0]), 1.0, 1.0, KeyedNoise(bytes(32)), ("doc",))
1
"""

from __future__ import annotations

import math

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.noise import Context, KeyedNoise


def em_probabilities(scores: np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """``P(i) ∝ exp(ε (u_i − max u) / (2Δ))`` (shifted by the maximum for stability)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ConfigError(f"selection epsilon ({epsilon!r}) must be a finite number > 0")
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ConfigError(f"selection sensitivity ({sensitivity!r}) must be a finite number > 0")
    u = np.asarray(scores, dtype=np.float64)
    if u.ndim != 1 or u.size == 0 or not np.isfinite(u).all():
        raise ConfigError("scores must be a non-empty 1-d array of finite numbers")
    logits = epsilon * (u - u.max()) / (2.0 * sensitivity)
    p = np.exp(logits)
    probabilities: np.ndarray = p / p.sum()
    return probabilities


def exponential_mechanism(
    scores: np.ndarray,
    epsilon: float,
    sensitivity: float,
    noise: KeyedNoise,
    context: Context,
    stream: int = 0,
    event: int = 0,
) -> int:
    """Index drawn with ``P(i) ∝ exp(ε u_i / (2Δ))``; ε-DP for utilities of sensitivity Δ.

    The uniform ``U ∈ (0, 1]`` at ``(context, stream, event)`` picks the first index whose
    cumulative probability reaches ``U`` (inverse CDF; floating-point rounding only).
    """
    p = em_probabilities(scores, epsilon, sensitivity)
    u = float(noise.uniform_at(context, np.array([stream], np.uint64),
                               np.array([event], np.uint64))[0])
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="left"), p.size - 1))


def cyclic_order(noise: KeyedNoise, context: Context, n_workloads: int) -> np.ndarray:
    """A permutation of the workloads derived from the key alone (public randomness; no data).

    The cyclic schedule measures ``order[((t − 1)·k + l) mod W]`` at round l of step t: k
    distinct workloads per step (k ≤ W) and every workload once in every ⌈W/k⌉ consecutive
    steps, so no attribute can be starved. It reads no data, so it spends no ε.

    >>> from dpsynth.noise import KeyedNoise
    >>> order = cyclic_order(KeyedNoise(bytes(32)), ("doc",), 5)
    >>> picks = [cyclic_pick(order, t, 2, l) for t in (1, 2, 3) for l in (0, 1)]
    >>> sorted(order.tolist()), picks == [int(order[i % 5]) for i in range(6)]
    ([0, 1, 2, 3, 4], True)
    """
    u = noise.uniform_at(context, np.arange(n_workloads, dtype=np.uint64),
                         np.zeros(n_workloads, np.uint64))
    return np.argsort(u, kind="stable")


def cyclic_pick(order: np.ndarray, step: int, k: int, round_: int) -> int:
    """Workload of round ``round_`` (from 0) of step ``step`` (from 1) on the cyclic schedule."""
    return int(order[((step - 1) * k + round_) % order.size])


def workload_scores(target: list[np.ndarray], answers: list[np.ndarray], cells: np.ndarray,
                    open_: list[int], *, score: str, bias: str) -> np.ndarray:
    """The EM utilities of the open workloads: ``‖q_i(∇f_t + g_{t−1}) − q_i(h)‖₁`` per cell
    (``score="mean"``, §7.2) or in total (``"l1"``), minus the bias term (T8)."""
    scores = np.array([np.abs(target[i] - answers[i]).sum() for i in open_])
    if score == "mean":
        scores = scores / cells[open_]
    if bias == "paper":
        scores -= cells[open_]
    elif bias == "scaled":
        scores -= 1.0
    return scores
