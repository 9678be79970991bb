"""Integration tests against a real Kafka broker (``pytest tests/integration``).

The fixtures are the shipped pytest plugin's (:mod:`dpsynth.testing.plugin`, the same ones
downstream teams use: one broker launcher, one recorded-topic importer); they are imported here
too so that the suite also runs from a source tree whose package is not installed
(``PYTHONPATH=operators``).
"""

from __future__ import annotations

from dpsynth.testing.plugin import (
    dpsynth_import_recording,
    dpsynth_recorded_topic,
    dpsynth_recording,
    dpsynth_synthetic_dataset,
    kafka_bootstrap,
    pytest_configure,
)

__all__ = [
    "dpsynth_import_recording", "dpsynth_recorded_topic", "dpsynth_recording",
    "dpsynth_synthetic_dataset", "kafka_bootstrap", "pytest_configure",
]
