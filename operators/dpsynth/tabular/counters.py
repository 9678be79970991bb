"""Continual counters on derived noise: Simple, Block and unbounded Block (paper 003 §3.6, Alg 4).

Layer: core. Each counter releases noisy prefix sums of its own input sequence, vectorised over
``dim`` cells (a workload's histogram; ``dim = 1`` is the scalar counter). Its clock advances
only when it is fed (:meth:`feed`), i.e. when its workload is selected (docs/algorithms.md S.2.3):
noise addresses are ``(context, stream = cell, event)`` with event ``2τ`` for the in-block item of
the counter's τ-th input and ``2τ + 1`` for the block sum closed at τ, so the same key gives the
same noise on replay. All noise is exact discrete Laplace (integer counts).

Privacy (inputs with L1 sensitivity ``sensitivity``; ε for the whole input stream):

``simple`` — Chan, Shi, Song (2011) Simple Counting Mechanism II: every input gets
    Lap(s/ε) per cell; output Σ_{τ≤n} (x_τ + Z_τ). Each input is in one noisy sum: ε-DP.
    Var(C(n) − truth) = n · Var(Lap_Z(s/ε)).
``block`` — Chan et al. Two-Level mechanism with fixed block size B: noisy block sums, plus
    noisy items inside the open block; every input is in at most two noisy sums, Lap(2s/ε):
    ε-DP. At n = qB + r: variance (q + r) · Var(Lap_Z(2s/ε)).
``unbounded_block`` — paper 003 Alg 4 (Thm 8.1): partitions of length B² with block size B =
    2, 3, 4, …; block ends at τ = 2, 4, 7, 10, 13, 17, 21, …; Lap(2s/ε) per noisy sum; ε-DP.
    The in-block sums are zeroed at every block end; α_lastBlock is never reset.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import Context, KeyedNoise, discrete_laplace_variance
from dpsynth.params import PARAMS

COUNTERS = PARAMS["tabular_counter"].values


class Counter:
    """A ``dim``-cell continual counter (see the module docstring for the three kinds).

    Parameters
    ----------
    kind
        ``"simple"``, ``"block"`` or ``"unbounded_block"``.
    dim
        Number of cells.
    epsilon
        Budget of the counter over its whole input stream.
    noise, context
        Derived noise and this counter's context (unique per counter).
    sensitivity
        L1 sensitivity of one input vector (1 under add/remove of one record).
    block_size
        B of the bounded ``block`` counter (Chan et al.: √T for horizon T).

    >>> c = Counter("unbounded_block", 1, 1.0, KeyedNoise(bytes(32)), ("doc",))
    >>> [c.feed(np.array([1]))[0] is not None for _ in range(3)], c.clock, c.block_ends(7)
    ([True, True, True], 3, [2, 4, 7])
    """

    def __init__(
        self,
        kind: str,
        dim: int,
        epsilon: float,
        noise: KeyedNoise,
        context: Context,
        *,
        sensitivity: float = 1.0,
        block_size: int = 8,
    ) -> None:
        if kind not in COUNTERS:
            raise ConfigError(f"counter ({kind!r}) must be one of {COUNTERS}")
        if not (epsilon > 0 and np.isfinite(epsilon)):
            raise ConfigError(f"counter epsilon ({epsilon!r}) must be a finite number > 0")
        if kind == "block" and (isinstance(block_size, bool) or int(block_size) < 1):
            raise ConfigError(f"block_size ({block_size!r}) must be an integer >= 1")
        self.kind, self.dim, self.epsilon = kind, int(dim), float(epsilon)
        self.sensitivity = float(sensitivity)
        self.scale = self.sensitivity / self.epsilon * (1 if kind == "simple" else 2)
        self._noise, self._context = noise, tuple(context)
        self._streams = np.arange(self.dim, dtype=np.uint64)
        self.clock = 0  # inputs fed so far (the counter's own time)
        self.block = 2 if kind == "unbounded_block" else int(block_size)
        self.partition_len = self.block**2 if kind == "unbounded_block" else 0
        self.at_partition = 0
        self.last_block_end = 0
        self.closed = np.zeros(self.dim, np.int64)  # noisy sum of completed blocks (α_lastBlock)
        self.true_in_block = np.zeros(self.dim, np.int64)
        self.noisy_in_block = np.zeros(self.dim, np.int64)
        self.value = np.zeros(self.dim, np.int64)

    def _lap(self, event: int) -> np.ndarray:
        events = np.full(self.dim, event, dtype=np.uint64)
        return self._noise.discrete_laplace_at(self.scale, self._context, self._streams, events)

    def feed(self, x: np.ndarray) -> np.ndarray:
        """Advance the clock by one input ``x`` (``dim`` integers); return the new prefix sum."""
        x = np.asarray(x)
        if x.shape != (self.dim,) or x.dtype.kind not in "iu":
            raise ConfigError(f"counter input must be {self.dim} integers; got {x.shape}")
        self.clock += 1
        tau = self.clock
        if self.kind == "simple":
            self.value = self.value + x + self._lap(2 * tau)
            return self.value.copy()
        self.true_in_block += x
        if self._is_block_end(tau):
            self.closed = self.closed + self.true_in_block + self._lap(2 * tau + 1)
            self.true_in_block[:] = 0
            self.noisy_in_block[:] = 0
            self.last_block_end = tau
            self.value = self.closed.copy()
            if self.kind == "unbounded_block" and tau - self.at_partition == self.partition_len:
                self.at_partition = tau
                self.block += 1
                self.partition_len = self.block**2
        else:
            self.noisy_in_block = self.noisy_in_block + x + self._lap(2 * tau)
            self.value = self.closed + self.noisy_in_block
        return self.value.copy()

    def _is_block_end(self, tau: int) -> bool:
        return (tau - self.at_partition) % self.block == 0

    def block_ends(self, horizon: int) -> list[int]:
        """Block-end clock values up to ``horizon`` of a fresh counter of this kind (public)."""
        probe = Counter.__new__(Counter)
        probe.kind, probe.clock = self.kind, 0
        probe.block = 2 if self.kind == "unbounded_block" else self.block
        probe.partition_len = probe.block**2 if self.kind == "unbounded_block" else 0
        probe.at_partition = 0
        if self.kind == "simple":
            return []
        ends = []
        for tau in range(1, horizon + 1):
            if probe._is_block_end(tau):
                ends.append(tau)
                closes = tau - probe.at_partition == probe.partition_len
                if self.kind == "unbounded_block" and closes:
                    probe.at_partition, probe.block = tau, probe.block + 1
                    probe.partition_len = probe.block**2
        return ends

    def error_variance(self, n: int | None = None) -> float:
        """Var(C(n) − Σ x) per cell after ``n`` inputs (default: now), from the schedule."""
        n = self.clock if n is None else int(n)
        v = discrete_laplace_variance(self.scale)
        if self.kind == "simple":
            return n * v
        ends = self.block_ends(n)
        last = ends[-1] if ends else 0
        return (len(ends) + (n - last)) * v

    # -- state ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Everything needed to continue (no key material)."""
        return {"clock": self.clock, "block": self.block, "partition_len": self.partition_len,
                "at_partition": self.at_partition, "last_block_end": self.last_block_end,
                "closed": self.closed, "true_in_block": self.true_in_block,
                "noisy_in_block": self.noisy_in_block, "value": self.value}

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`; raises StateCorruptError on a shape mismatch."""
        try:
            for name in ("clock", "block", "partition_len", "at_partition", "last_block_end"):
                setattr(self, name, int(state[name]))
            for name in ("closed", "true_in_block", "noisy_in_block", "value"):
                arr = np.asarray(state[name], dtype=np.int64)
                if arr.shape != (self.dim,):
                    raise ValueError(name)
                setattr(self, name, arr.copy())
        except (KeyError, ValueError, TypeError) as exc:
            raise StateCorruptError(
                f"counter state is damaged ({exc}); restore from an intact snapshot"
            ) from None
