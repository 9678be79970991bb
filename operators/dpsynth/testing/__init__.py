"""Test kit shipped with dpsynth: a Kafka broker launcher and topic helpers for integration tests.

Layer: adapter. :mod:`~dpsynth.testing.broker` starts a real single-node KRaft broker (an
existing one, a container, or Apache Kafka's jars fetched by Maven); :mod:`~dpsynth.testing.kafka`
creates topics, produces records, reads topics and runs a worker process.
"""

from __future__ import annotations
