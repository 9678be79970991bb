"""PHDStream, a clean-room peer for the benchmarks (Kumar, Strohmer, Vershynin, arXiv 2401.14577).

Layer: adapter (a benchmark baseline: its noise is seeded ``numpy.random`` continuous Laplace,
as in the paper's experiments; nothing here is part of the product).

Written from the paper's description and docs/algorithms.md E.2; the public code
(k-girish/phdstream) was only run, from a folder outside the repository, to check the numbers
(docs/lab/concentrated-streams.md, "Peer agreement"). The hierarchy is the Morton tree of
:mod:`dpsynth.tree` (midpoint bisections, coordinates in turn, half-open cells).

Per step t with batch B_t, from the root, a node v at depth k with this step's count c_t(v) and
its running noisy estimate m(v) = a(v) + s(v) + g(v) (its ancestors' share, its own counter, its
descendants' counters) computes the biased count b = max(c_t(v) + m(v) − k·δ, θ − δ); if k <
max_depth and b + Lap(λ) > θ, v is internal this step: its two children are created if
missing, each gets a(child) = (s(v) + a(v))/2, both are visited, and g(v) = Σ_children (s + g).
Otherwise v is a leaf this step: its counter adds c_t(v) plus counter noise. The release draws
max(round(m(v)), 0) points uniformly in every leaf of this step.

Parameters (β = 2): ε' = ε / sensitivity (1 under insertion, 2 for a replacement), λ = 3/(ε'/2),
δ = λ·ln 2, θ = 0, counter ε_c = ε'/2: ``simple`` adds Lap(1/ε_c) per count; ``block_8`` adds
Lap(2/ε_c) to a block's sum every 8 counts of the node and runs a simple counter at ε_c/2
inside the block. The tree starts at the bare root (no initialisation from a stream prefix).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpsynth.tree import leaf_bounds, route

COUNTERS = ("simple", "block_8")


class PHDStream:
    """The streaming synthesizer (module docstring); ``step(batch)`` then ``release()``."""

    def __init__(self, epsilon: float, *, sensitivity: int = 1, seed: int = 0,
                 max_depth: int = 20, counter: str = "simple", theta: float = 0.0) -> None:
        if counter not in COUNTERS:
            raise ValueError(f"counter ({counter!r}) must be one of {COUNTERS}")
        eps = epsilon / sensitivity
        self.lam = 3.0 / (eps / 2.0)
        self.delta = self.lam * math.log(2.0)
        self.count_eps = eps / 2.0
        self.theta = theta
        self.max_depth = max_depth
        self.counter = counter
        self.rng = np.random.default_rng(seed)
        # node arrays (grown by doubling): depth, prefix, first child (−1: none), a, s, g,
        # and the block counter's state (counts so far, closed blocks' noisy sum, open block)
        self._n = 1
        size = 1024
        self.depth = np.zeros(size, np.int64)
        self.prefix = np.zeros(size, np.uint64)
        self.child = np.full(size, -1, np.int64)
        self.a, self.s, self.g = np.zeros(size), np.zeros(size), np.zeros(size)
        self.times = np.zeros(size, np.int64)
        self.closed = np.zeros(size)
        self.open_true = np.zeros(size)
        self.open_noisy = np.zeros(size)
        self.leaves = np.zeros(1, np.int64)

    def _grow(self, need: int) -> None:
        size = self.depth.size
        if need <= size:
            return
        new = max(need, 2 * size)
        for name in ("depth", "prefix", "child", "a", "s", "g", "times", "closed", "open_true",
                     "open_noisy"):
            old = getattr(self, name)
            fill = -1 if name == "child" else 0
            arr = np.full(new, fill, old.dtype)
            arr[:size] = old
            setattr(self, name, arr)

    def _count(self, nodes: np.ndarray, c: np.ndarray) -> None:
        """The leaves' counters add this step's counts (noise: module docstring)."""
        if self.counter == "simple":
            self.s[nodes] += c + self.rng.laplace(0.0, 1.0 / self.count_eps, nodes.size)
            return
        self.times[nodes] += 1
        self.open_true[nodes] += c
        ends = self.times[nodes] % 8 == 0
        done, going = nodes[ends], nodes[~ends]
        if done.size:  # a block ends: its true sum plus Lap(2/ε_c) joins the closed sum
            self.closed[done] += self.open_true[done] + self.rng.laplace(
                0.0, 2.0 / self.count_eps, done.size)
            self.open_true[done] = 0.0
            self.open_noisy[done] = 0.0
            self.s[done] = self.closed[done]
        if going.size:  # inside a block: a simple counter at ε_c/2
            self.open_noisy[going] += c[~ends] + self.rng.laplace(
                0.0, 2.0 / self.count_eps, going.size)
            self.s[going] = self.closed[going] + self.open_noisy[going]

    def step(self, batch: np.ndarray) -> None:
        """Process one batch (n×2 points in [0,1]^2): one pass of the tree (module docstring)."""
        cells = np.sort(route(np.asarray(batch, np.float64), depth=self.max_depth))
        active = np.zeros(1, np.int64)
        internal: list[np.ndarray] = []
        leaves: list[np.ndarray] = []
        while active.size:
            k = self.depth[active]
            shift = (self.max_depth - k).astype(np.uint64)
            lo = np.searchsorted(cells, self.prefix[active] << shift)
            hi = np.searchsorted(cells, (self.prefix[active] + np.uint64(1)) << shift)
            c = (hi - lo).astype(np.float64)
            metric = self.a[active] + self.s[active] + self.g[active]
            b = np.maximum(c + metric - k * self.delta, self.theta - self.delta)
            split = (k < self.max_depth) & (b + self.rng.laplace(0.0, self.lam, active.size)
                                            > self.theta)
            here, there = active[split], active[~split]
            if there.size:
                self._count(there, c[~split])
                leaves.append(there)
            if not here.size:
                break
            fresh = here[self.child[here] < 0]
            if fresh.size:  # create the missing children: two consecutive nodes each
                first = self._n + 2 * np.arange(fresh.size)
                self._grow(self._n + 2 * fresh.size)
                self._n += 2 * fresh.size
                self.child[fresh] = first
                for offset in (0, 1):
                    kid = first + offset
                    self.depth[kid] = self.depth[fresh] + 1
                    self.prefix[kid] = (self.prefix[fresh] << np.uint64(1)) | np.uint64(offset)
            share = (self.s[here] + self.a[here]) / 2.0  # equal split of the ancestors' mass
            kids = np.concatenate([self.child[here], self.child[here] + 1])
            self.a[kids] = np.concatenate([share, share])
            internal.append(here)
            active = kids
        for here in reversed(internal):  # descendants' counters, bottom up
            left, right = self.child[here], self.child[here] + 1
            self.g[here] = self.s[left] + self.g[left] + self.s[right] + self.g[right]
        self.leaves = np.concatenate(leaves) if leaves else np.zeros(0, np.int64)

    def release(self) -> np.ndarray:
        """max(round(m(v)), 0) uniform points in every leaf of the last step."""
        leaves = self.leaves
        metric = self.a[leaves] + self.s[leaves] + self.g[leaves]
        counts = np.maximum(np.round(metric), 0).astype(np.int64)
        out = []
        for k in np.unique(self.depth[leaves]):
            mine = self.depth[leaves] == k
            lower, upper = leaf_bounds(self.prefix[leaves[mine]].astype(np.int64), d=2,
                                       depth=int(k))
            per = counts[mine]
            lower, upper = np.repeat(lower, per, axis=0), np.repeat(upper, per, axis=0)
            out.append(lower + self.rng.random(lower.shape) * (upper - lower))
        return np.concatenate(out) if out else np.zeros((0, 2))

    @property
    def n_nodes(self) -> int:
        """Nodes created so far."""
        return self._n


def phdstream_releases(x: np.ndarray, epsilon: float, sizes: Any, *, sensitivity: int = 1,
                       seed: int = 0, step: int = 500, counter: str = "simple"
                       ) -> dict[int, np.ndarray]:
    """Points released after each t in ``sizes`` (multiples of ``step``), one run over x."""
    peer = PHDStream(epsilon, sensitivity=sensitivity, seed=seed, counter=counter)
    wanted, out = set(sizes), {}
    for start in range(0, len(x), step):
        peer.step(x[start:start + step])
        t = min(start + step, len(x))
        if t in wanted:
            out[t] = peer.release()
    return out
