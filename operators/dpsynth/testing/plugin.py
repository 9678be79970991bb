"""The pytest plugin of dpsynth (entry point ``pytest11``; ``pip install dpsynth[testing]``).

Layer: adapter. Fixtures for tests against a real Kafka broker and a recorded synthetic topic
(all session-scoped: one broker, one import per session):

``kafka_bootstrap``
    The broker's address: ``KAFKA_BOOTSTRAP_SERVERS`` when set (an existing broker, left
    alone), else a container where a Docker engine answers (testcontainers; when the
    container cannot start, the next), else the local single-node KRaft broker of the
    packaged ``kafka-local.sh`` (Apache Kafka's jars from Maven Central; Java 17 and Maven).
    It is stopped at the end of the session only if the fixture started it. When none can
    run, the test is skipped naming what is missing — or fails, with
    ``DPSYNTH_KAFKA_REQUIRED=1`` (CI).
``dpsynth_recording``
    The path of the recording to replay: ``--dpsynth-recording PATH``, else the ini option
    ``dpsynth_recording`` (relative to the rootdir), else the bundled example of a synthetic
    topic (:func:`dpsynth.testing.recordings.example_recording`). Override the fixture in a
    ``conftest.py`` to choose per directory.
``dpsynth_recorded_topic``
    A fresh topic on ``kafka_bootstrap`` filled from ``dpsynth_recording`` (partitions, keys,
    headers, order and timestamps as recorded): a
    :class:`~dpsynth.testing.recordings.RecordedTopic` (``.bootstrap``, ``.topic``,
    ``.header``, ``.records``).
``dpsynth_synthetic_dataset``
    The merged synthetic dataset of ``dpsynth_recorded_topic``, read through the consumer
    library (:class:`~dpsynth.client.consumer.ReleaseConsumer`: checked, de-duplicated
    releases, every input partition's latest one): a
    :class:`~dpsynth.testing.recordings.SyntheticDataset` (``.points``, ``.columns``,
    ``.records()``, ``.epsilon``, ``.run_id``, ``.releases``).
``dpsynth_import_recording``
    A function ``(recording, topic=None, timestamps="recorded") -> RecordedTopic`` for
    tests that replay more than one recording.

Tests that use a broker should carry the ``kafka`` marker, so that ``-m "not kafka"`` leaves
them out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dpsynth.testing import broker

if TYPE_CHECKING:  # the plugin loads in every session: Kafka and numpy only when used
    from dpsynth.testing.recordings import RecordedTopic, SyntheticDataset

#: Set to 1 to fail, not skip, when no broker can run (CI, where a skip would hide it).
ENV_REQUIRED = "DPSYNTH_KAFKA_REQUIRED"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--dpsynth-recording`` and the ini option ``dpsynth_recording``."""
    group = parser.getgroup("dpsynth")
    group.addoption("--dpsynth-recording", metavar="PATH",
                    help="recording replayed by the dpsynth_recorded_topic fixture "
                         "(default: the bundled example synthetic topic)")
    parser.addini("dpsynth_recording", "recording replayed by dpsynth_recorded_topic "
                                       "(path relative to the rootdir)")


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
            reason = f"no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS or install {missing}"
            if os.environ.get(ENV_REQUIRED, "").strip() not in ("", "0"):
                pytest.fail(f"{reason} ({ENV_REQUIRED} is set)")
            pytest.skip(reason)
    handle = broker.acquire_broker(use_docker=use_docker)
    try:
        yield handle.bootstrap
    finally:
        broker.release_broker(handle)


@pytest.fixture(scope="session")
def dpsynth_recording(pytestconfig: pytest.Config) -> Path:
    """The recording that ``dpsynth_recorded_topic`` replays (see the module docstring)."""
    option = pytestconfig.getoption("--dpsynth-recording", default=None)
    if option:
        return Path(option).resolve()
    try:
        ini = pytestconfig.getini("dpsynth_recording")
    except ValueError:  # the fixture imported by a conftest, the plugin not loaded
        ini = None
    if ini:
        return (Path(str(pytestconfig.rootpath)) / str(ini)).resolve()
    from dpsynth.testing.recordings import example_recording

    return example_recording()


@pytest.fixture(scope="session")
def dpsynth_import_recording(kafka_bootstrap: str) -> Callable[..., RecordedTopic]:
    """``(recording, topic=None, timestamps="recorded") -> RecordedTopic``: a fresh topic."""
    from dpsynth.testing.recordings import import_to_new_topic

    def replay(recording: str | Path, topic: str | None = None,
               timestamps: str = "recorded") -> RecordedTopic:
        return import_to_new_topic(kafka_bootstrap, recording, topic=topic,
                                   timestamps=timestamps)

    return replay


@pytest.fixture(scope="session")
def dpsynth_recorded_topic(dpsynth_import_recording: Callable[..., RecordedTopic],
                           dpsynth_recording: Path) -> RecordedTopic:
    """A fresh topic filled from ``dpsynth_recording``."""
    return dpsynth_import_recording(dpsynth_recording)


@pytest.fixture(scope="session")
def dpsynth_synthetic_dataset(dpsynth_recorded_topic: RecordedTopic
                              ) -> Iterator[SyntheticDataset]:
    """The merged synthetic dataset of ``dpsynth_recorded_topic`` (consumer library)."""
    from dpsynth.testing.recordings import read_synthetic_dataset

    dataset: Any = read_synthetic_dataset(dpsynth_recorded_topic)
    yield dataset
