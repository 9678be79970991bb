"""The default mechanism, ``guided``: octal time nodes and partitions from released summaries.

Layer: core (docs/privacy.md P16). :mod:`~dpsynth.online.guided.mechanism` holds
:class:`GuidedMechanism`, which runs the ordered stages declared in
:mod:`~dpsynth.online.guided.pipeline`; each other module is the concept of one stage
(``partition``, ``refinement``, ``node_reuse``, ``floors``, ``local_mass``, ``em``, ``tilt``) or a
helper they share (``guide_mass``).
"""

from __future__ import annotations

from dpsynth.online.guided.mechanism import (
    LEAF_FLOOR_SCALES,
    TIME_FANOUT_BITS,
    GuidedMechanism,
    node_levels,
)
from dpsynth.online.guided.pipeline import (
    HISTORY_FLOOR_SCALES,
    HISTORY_MAX_EPSILON,
    HISTORY_SHARE,
    UNIFORM_PRIOR,
)

__all__ = ["HISTORY_FLOOR_SCALES", "HISTORY_MAX_EPSILON", "HISTORY_SHARE", "LEAF_FLOOR_SCALES",
           "TIME_FANOUT_BITS", "UNIFORM_PRIOR", "GuidedMechanism", "node_levels"]
