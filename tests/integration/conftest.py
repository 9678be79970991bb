"""Integration tests against a real Kafka broker (``pytest tests/integration``).

The session-scoped ``kafka_bootstrap`` fixture gives the broker's address:
``KAFKA_BOOTSTRAP_SERVERS`` when set (an existing broker, left alone), else a container where
Docker works, else the local single-node KRaft broker of ``deploy/kafka-local.sh`` (stopped at
the end of the session only if the fixture started it). Tests that use it carry the ``kafka``
marker (``pytestmark = pytest.mark.kafka``), so ``-m "not kafka"`` leaves them out.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dpsynth.stream import broker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka: needs a real Kafka broker (fixture kafka_bootstrap, tests/integration)"
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
