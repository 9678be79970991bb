"""The stream's size |f_t| as the tabular synthesizer may use it (issue 13).

Layer: core. Under **replacement** neighbours the number of records of every step is public
(two neighbouring streams have the same step sizes), so :class:`StreamSize` holds the exact
count. Under **add/remove** it is private: one record more changes it. Then the size is a
continual counter of the step sizes — paper 003's unbounded Block counter (Alg 4) over one cell,
one input per step (the step's record count, sensitivity 1), Lap_Z(2/ε_n) per noisy sum, so the
whole sequence of noisy totals is ε_n-DP (docs/privacy.md P12). The synthesizer scales h_{t,0}
and sizes each released table from these noisy totals only; the true count never leaves
:attr:`StreamSize.exact` (kept for snapshots, never released).

>>> from dpsynth.noise import KeyedNoise
>>> size = StreamSize("add_remove", 0.5, KeyedNoise(bytes(32)), ("doc",))
>>> size.feed(40); size.feed(60); size.rows == max(round(size.total), 0), size.exact
(True, 100)
>>> public = StreamSize("replace", 0.0, KeyedNoise(bytes(32)), ("doc",))
>>> public.feed(40); public.feed(60); public.rows, public.step_size
(100, 60.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import Context, KeyedNoise
from dpsynth.tabular.counters import Counter

#: Share of ε spent on the size counter under add/remove (docs/tabular.md T17).
SIZE_SHARE = 0.1
#: The continual counter of the step sizes (unbounded: no horizon needs to be known).
SIZE_COUNTER = "unbounded_block"


class StreamSize:
    """Exact (replacement) or ε_n-DP noisy (add/remove) running size of the stream.

    Parameters
    ----------
    neighbours
        ``"replace"`` (the size is public) or ``"add_remove"`` (private: noisy).
    epsilon
        ε_n of the size counter under add/remove (ignored under replacement, must be > 0
        under add/remove).
    noise, context
        Derived noise and the counter's context (unique per synthesizer).
    """

    def __init__(self, neighbours: str, epsilon: float, noise: KeyedNoise,
                 context: Context) -> None:
        self.noisy = neighbours == "add_remove"
        if self.noisy and not (np.isfinite(epsilon) and epsilon > 0):
            raise ConfigError(f"size epsilon ({epsilon!r}) must be > 0 under add/remove")
        self.epsilon = float(epsilon) if self.noisy else 0.0
        self._counter = (Counter(SIZE_COUNTER, 1, self.epsilon, noise, context)
                         if self.noisy else None)
        self.exact = 0  # the true count: state only, never released under add/remove
        self._total = 0.0
        self._previous = 0.0

    def feed(self, n: int) -> None:
        """One step of ``n`` records."""
        self.exact += int(n)
        self._previous = self._total
        if self._counter is None:
            self._total = float(self.exact)
        else:  # privacy: P12 (one input per step; the counter is ε_n-DP over its stream)
            self._total = float(self._counter.feed(np.array([int(n)], np.int64))[0])

    @property
    def total(self) -> float:
        """|f_t| (replacement) or its noisy estimate clipped at 0 (add/remove)."""
        return max(self._total, 0.0)

    @property
    def rows(self) -> int:
        """Rows of the released table: |f_t|, or the noisy total rounded (never the count)."""
        return max(int(round(self._total)), 0)

    @property
    def step_size(self) -> float:
        """The last step's size: exact, or the difference of two noisy totals clipped at 0."""
        return max(self._total - self._previous, 0.0)

    def state(self) -> dict[str, Any]:
        """Everything needed to continue (no key material)."""
        return {"exact": self.exact, "total": self._total, "previous": self._previous,
                "counter": None if self._counter is None else self._counter.state()}

    def load_state(self, state: dict[str, Any] | None, records_seen: int) -> None:
        """Inverse of :meth:`state` (``None``: a snapshot from before issue 13, replacement)."""
        if state is None:
            if self.noisy:
                raise StateCorruptError("the snapshot has no noisy size: it was written by an "
                                        "older dpsynth; start a new run under add/remove")
            self.exact = self._total = int(records_seen)
            return
        self.exact = int(state["exact"])
        self._total, self._previous = float(state["total"]), float(state["previous"])
        if self._counter is not None:
            self._counter.load_state(state["counter"])
