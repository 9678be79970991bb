"""The privacy suite needs the broker fixture for the worker's audit (tests/integration's)."""

from __future__ import annotations

from dpsynth.testing.plugin import kafka_bootstrap

__all__ = ["kafka_bootstrap"]
