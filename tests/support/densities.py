"""Random piecewise-constant densities on Morton intervals (test inputs for releases)."""

from __future__ import annotations

import numpy as np


def random_density(rng: np.random.Generator, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to 40 intervals at ``depth`` (the first at 0), densities over five decades, 30 % zero."""
    k = int(rng.integers(1, min(40, 1 << depth) + 1))
    starts = np.sort(rng.choice(1 << depth, k, replace=False)).astype(np.int64)
    starts[0] = 0
    density = rng.exponential(1.0, k) * (rng.random(k) < 0.7) * 10 ** rng.uniform(-3, 2)
    return starts, density
