"""Integration tests against a real Kafka broker (``pytest tests/integration``).

The broker fixture is the shipped pytest plugin's (:mod:`dpsynth.testing.plugin`, the same one
downstream teams use); it is imported here too so that the suite also runs from a source tree
whose package is not installed (``PYTHONPATH=operators``).
"""

from __future__ import annotations

from dpsynth.testing.plugin import kafka_bootstrap, pytest_configure

__all__ = ["kafka_bootstrap", "pytest_configure"]
