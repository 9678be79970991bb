"""The pytest plugin of dpsynth (entry point ``pytest11``; ``pip install dpsynth[testing]``).

Layer: adapter. Fixtures for integration tests against a real Kafka broker:

``kafka_bootstrap`` (session)
    The broker's address: ``KAFKA_BOOTSTRAP_SERVERS`` when set (an existing broker, left
    alone), else a container where Docker works, else the local single-node KRaft broker of the
    packaged ``kafka-local.sh`` (stopped at the end of the session only if the fixture started
    it). Skips the test, naming what is missing, when none can run.

Tests that use it should carry the ``kafka`` marker, so that ``-m "not kafka"`` leaves them out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dpsynth.testing import broker


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``kafka`` marker."""
    config.addinivalue_line(
        "markers", "kafka: needs a real Kafka broker (fixture kafka_bootstrap)"
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address of a live Kafka broker for the whole test session."""
    use_docker = False
    if not os.environ.get(broker.ENV_BOOTSTRAP, "").strip():
        use_docker = broker.docker_available()
        missing = [] if use_docker else broker.missing_prerequisites()
        if missing:
            pytest.skip(f"no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS or install {missing}")
    handle = broker.acquire_broker(use_docker=use_docker)
    try:
        yield handle.bootstrap
    finally:
        broker.release_broker(handle)
