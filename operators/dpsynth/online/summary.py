"""A released histogram summary: a partition's leaves, their noisy counts and a size estimate.

Layer: core. The blocks (Alg 3's time levels), the open block's nodes and the step summaries
of ``guided`` and ``adaptive`` are summaries: PrivTree or guided leaves (depth and Morton
prefix each), noisy leaf counts and the summary's size estimate, with the floor below which a
count is treated as noise and the leaf noise scale where the mechanism records them.

Privacy: a summary is released once (its noise is drawn when it is made, P9/P16); everything
computed from it afterwards is post-processing (P6), so derived values are cached on the
summary itself (:meth:`Summary.derived`) for as long as it is held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from dpsynth._types import CellIds, Counts

T = TypeVar("T")

#: Snapshot keys in their order (a snapshot's bytes depend on it): the optional ones last.
_REQUIRED = ("depths", "prefixes", "counts", "size")
_OPTIONAL = ("floor", "scale", "dropped", "dropped_counts")


@dataclass(eq=False)
class Summary:
    """One released histogram.

    ``depths`` and ``prefixes``: each leaf's depth and Morton prefix (the leaves partition the
    cube); ``counts``: the noisy leaf counts; ``size``: the size estimate (public under
    replacement, a pooled noisy estimate under add/remove); ``floor``: counts at most this are
    noise where the summary records its own floor (step summaries; None: the caller's);
    ``scale``: the leaf noise scale 1/ε where the mechanism records it (``guided``);
    ``dropped`` and ``dropped_counts``: the leaves whose counts the floors of
    :mod:`~dpsynth.online.guided.floors` set to 0, and their noisy counts before (``guided``, for
    :mod:`~dpsynth.online.guided.node_reuse`).
    """

    depths: Counts
    prefixes: CellIds
    counts: np.ndarray
    size: float
    floor: float | None = None
    scale: float | None = None
    dropped: np.ndarray | None = None
    dropped_counts: np.ndarray | None = None
    _derived: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def leaves(self) -> int:
        """The number of leaves."""
        return int(self.depths.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the leaves (depths, prefixes, counts and the counts the floors dropped)."""
        dropped = 0 if self.dropped is None or self.dropped_counts is None else (
            self.dropped.nbytes + self.dropped_counts.nbytes)
        return int(self.depths.nbytes + self.prefixes.nbytes + self.counts.nbytes + dropped)

    def derived(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, once per ``key`` while this summary is held (post-processing of a
        summary that never changes once released)."""
        if key not in self._derived:
            self._derived[key] = compute()
        value: T = self._derived[key]
        return value

    def forget_derived(self) -> None:
        """Drop the cached derived values (memory: a new release depth needs others)."""
        self._derived.clear()

    def to_state(self) -> dict[str, Any]:
        """The snapshot entry: the fields by name, the optional ones only when set."""
        state: dict[str, Any] = {name: getattr(self, name) for name in _REQUIRED}
        state.update({name: getattr(self, name) for name in _OPTIONAL
                      if getattr(self, name) is not None})
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Summary:
        """Inverse of :meth:`to_state`."""
        return cls(**{name: state[name] for name in (*_REQUIRED, *_OPTIONAL) if name in state})
