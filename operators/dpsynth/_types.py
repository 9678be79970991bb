"""Array aliases used in public signatures.

Layer: core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Points = NDArray[np.float64]
Counts = NDArray[np.int64]
CellIds = NDArray[np.uint64]


@dataclass(frozen=True, eq=False)
class LeafCounts:
    """The counts of one release: the released size, the leaf depth D and the leaves' counts,
    dense (2^D counts in Morton order) or sparse (occupied leaves ascending with their counts).

    Exactly one of ``dense`` and ``occupied`` is set; both forms sum to ``size``.
    """

    size: int
    depth: int
    dense: Counts | None = None
    occupied: tuple[CellIds, Counts] | None = None

    def __post_init__(self) -> None:
        if (self.dense is None) == (self.occupied is None):
            raise ValueError("LeafCounts holds dense or occupied counts, exactly one")
