"""The consumer library: checked, de-duplicated releases from the synthetic topic, merged.

Layer: adapter (confluent-kafka, no Faust): ``pip install dpsynth[client]``. See
:mod:`~dpsynth.client.consumer`.
"""

from __future__ import annotations

from dpsynth.client.consumer import ReleaseConsumer, ReleaseEvent, ReleaseTracker

__all__ = ["ReleaseConsumer", "ReleaseEvent", "ReleaseTracker"]
