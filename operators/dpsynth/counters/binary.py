"""Binary Mechanism: the finite-horizon continual counter inside Sparse Counting (A_sub).

Layer: core. Chan, Shi and Song (2011, Alg 2) as fixed in docs/algorithms.md A.5.1, C.10: horizon T,
L = number of binary digits of T, one Lap_Z(L/ε) per dyadic node. The noise of node (i, k) — the
p-sum of length 2^i ending at k·2^i — is derived from (context, stream, event = k·64 + i), so it
never has to be stored: the output at step m is the exact running total plus the noise of the nodes
that cover [1, m], which is what lets the level form keep two integers per cell instead of 2L.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise

#: Node events are k·64 + i, so levels must stay below 64.
_NODE_SHIFT = 6


def binary_levels(horizon: int) -> int:
    """L: the number of binary digits of the horizon T (= ⌈log2(T+1)⌉).

    >>> [binary_levels(T) for T in (1, 2, 3, 1023, 1024)]
    [1, 2, 2, 10, 11]
    """
    if horizon < 1:
        raise ConfigError(f"horizon ({horizon}) must be >= 1")
    return int(horizon).bit_length()


def node_noise(
    noise: KeyedNoise,
    scale: float,
    context: Sequence[int | str],
    streams: np.ndarray,
    steps: np.ndarray,
    levels: int,
) -> np.ndarray:
    """Σ over set bits i of steps[c] of the node noise η(i, steps[c] >> i), per stream c.

    The dyadic decomposition of [1, m] uses node (i, m >> i) for each set bit i of m
    (docs/algorithms.md A.5.1).
    """
    streams = np.asarray(streams, dtype=np.uint64)
    steps = np.asarray(steps, dtype=np.int64)
    total = np.zeros(steps.shape[0], dtype=np.int64)
    for i in range(levels):
        has_bit = ((steps >> i) & 1).astype(bool)
        if not has_bit.any():
            continue
        k = (steps[has_bit] >> i).astype(np.uint64)
        events = (k << np.uint64(_NODE_SHIFT)) | np.uint64(i)
        total[has_bit] += noise.discrete_laplace_at(scale, context, streams[has_bit], events)
    return total


class BinaryMechanism:
    """Continual counter with horizon T: Chan–Shi–Song Binary Mechanism (algorithms A.5.1, C.10).

    Error at step m is the sum of popcount(m) independent Lap_Z(L/ε) draws, so
    Var = popcount(m)·Var(Lap_Z(L/ε)) (docs/algorithms.md A.5.1). Inputs are non-negative integers
    (segment counts, C.10); outputs are integers.

    Privacy: ε-DP for a change of one input by ±1 over the whole horizon: each input lies in
    exactly L dyadic nodes, each noised with Lap_Z(L/ε). All noise is keyed by ``context``.

    Parameters
    ----------
    epsilon
        Budget ε of this counter.
    horizon
        T: the maximum number of updates.
    noise, context, stream
        Where the node noise comes from: ``(context + ("bm",), stream, k·64 + i)``.

    Examples
    --------
    >>> bm = BinaryMechanism(epsilon=1.0, horizon=8, noise=KeyedNoise(bytes(32)), context=("doc",))
    >>> for x in [1, 0, 2, 1]:
    ...     bm.update(x)
    >>> bm.true_total, isinstance(bm.value(), int)
    (4, True)
    """

    def __init__(
        self,
        epsilon: float,
        horizon: int,
        noise: KeyedNoise,
        context: Sequence[int | str],
        stream: int = 0,
    ) -> None:
        if not epsilon > 0:
            raise ConfigError(f"epsilon ({epsilon!r}) must be > 0")
        self.levels = binary_levels(horizon)
        self.horizon = int(horizon)
        self.scale = self.levels / epsilon  # privacy: P4
        self._noise = noise
        self._context = (*context, "bm")
        self._stream = np.array([stream], dtype=np.uint64)
        self.steps = 0
        self.true_total = 0
        self._value = 0

    def update(self, x: int) -> None:
        """Advance one step with the non-negative integer input ``x``."""
        if x < 0:
            raise ValueError("Binary Mechanism inputs must be non-negative")
        if self.steps >= self.horizon:
            raise ValueError(f"horizon ({self.horizon}) exhausted")
        self.steps += 1
        self.true_total += int(x)
        noise = node_noise(
            self._noise,
            self.scale,
            self._context,
            self._stream,
            np.array([self.steps]),
            self.levels,
        )
        self._value = self.true_total + int(noise[0])

    def value(self) -> int:
        """The private running total after the last update (0 before any)."""
        return self._value
