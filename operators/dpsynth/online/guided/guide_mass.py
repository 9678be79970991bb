"""The mass of a guide in a cell: compiled queries that walk the guide instead of searching it.

Layer: core, post-processing only (privacy: P6, P16: the guide is released summaries). A guide
is a piecewise-constant mass density on Morton intervals of depth ``depth`` (``starts``
ascending, ``density`` the mass per depth-``depth`` cell, ``widths``); the mass in [lo, hi) is
``below(hi) − below(lo)`` with below(x) = cum[i] + density[i]·(x − starts[i]) and i the interval
holding x. Guided partitions (:mod:`~dpsynth.online.guided.partition`) and floors
(:mod:`~dpsynth.online.guided.floors`) ask this for thousands of cells visited in Morton order,
whose positions barely move from one query to the next: :func:`index_at` finds i by galloping
from the previous answer (O(log distance)) rather than by a binary search over the whole guide
(O(log n) with a cache miss per step on a guide of 10⁶ intervals). It returns exactly the index
of ``searchsorted(starts, x, side="right") − 1`` clipped to [0, n − 1], so every mass is the
same float as before.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dpsynth._types import Counts, Points

#: Morton interval starts or widths, as floats (guides) or integers (a release's grid).
Codes = Points | Counts


@njit(cache=True)
def cumulative_mass(starts: Codes, density: Points, widths: Codes) -> Points:
    """The guide's mass before each interval: [0, m_0, m_0 + m_1, …]."""
    cum = np.zeros(starts.size + 1, np.float64)
    for i in range(starts.size):
        cum[i + 1] = cum[i] + density[i] * widths[i]
    return cum


@njit(cache=True)
def index_at(starts: Codes, x: float | np.int64, hint: int) -> int:
    """The interval holding ``x``: the largest i with starts[i] ≤ x, 0 if none; found from
    ``hint`` outwards (exponential, then binary search), whatever the hint."""
    n = starts.size
    i = min(max(hint, 0), n - 1)
    step = 1
    if starts[i] <= x:  # forward: starts[lo] <= x, and starts[hi] > x or hi == n
        lo = i
        while lo + step < n and starts[lo + step] <= x:
            lo += step
            step *= 2
        hi = min(lo + step, n)
    else:  # backward: starts[hi] > x, and starts[lo] <= x or lo == -1
        hi = i
        while hi - step >= 0 and starts[hi - step] > x:
            hi -= step
            step *= 2
        lo = max(hi - step, -1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= x:
            lo = mid
        else:
            hi = mid
    return max(lo, 0)


@njit(cache=True)
def mass_between(starts: Codes, density: Points, cum: Points, lo: float | np.int64,
                 hi: float | np.int64, hint: int) -> tuple[float, int]:
    """(the guide's mass in [lo, hi), the interval holding ``lo``: the next query's hint)."""
    i = index_at(starts, lo, hint)
    j = index_at(starts, hi, i)
    below_hi = cum[j] + density[j] * (hi - starts[j])
    below_lo = cum[i] + density[i] * (lo - starts[i])
    return below_hi - below_lo, i
