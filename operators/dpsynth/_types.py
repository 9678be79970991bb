"""Array aliases used in public signatures.

Layer: core.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Points = NDArray[np.float64]
Counts = NDArray[np.int64]
CellIds = NDArray[np.uint64]
