"""The default mechanism, ``guided``: octal time nodes and partitions from released summaries.

Layer: core (docs/privacy.md P16). :mod:`~dpsynth.online.guided.mechanism` holds
:class:`GuidedMechanism`; each other module is one stage concept of it or a helper they share
(:mod:`~dpsynth.online.guided.guide_mass`).
"""

from __future__ import annotations

from dpsynth.online.guided.mechanism import (
    HISTORY_FLOOR_SCALES,
    HISTORY_MAX_EPSILON,
    HISTORY_SHARE,
    LEAF_FLOOR_SCALES,
    TIME_FANOUT_BITS,
    UNIFORM_PRIOR,
    GuidedMechanism,
    node_levels,
)

__all__ = ["HISTORY_FLOOR_SCALES", "HISTORY_MAX_EPSILON", "HISTORY_SHARE", "LEAF_FLOOR_SCALES",
           "TIME_FANOUT_BITS", "UNIFORM_PRIOR", "GuidedMechanism", "node_levels"]
