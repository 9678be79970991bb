"""Topic administration for the client: a topic's partitions and retention, and a topic made
sure of (created, or checked to have enough partitions — never altered).

Layer: adapter (confluent-kafka, imported on first use so the client installs without it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from dpsynth.client.recording import RecordingError


class TopicError(RecordingError):
    """A topic cannot be read, created or written as asked; the message says how to fix it."""


def kafka_module() -> Any:
    """confluent_kafka with its admin module, or a TopicError naming the install."""
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401  (makes confluent_kafka.admin available)
    except ImportError:
        raise TopicError("confluent-kafka is not installed: pip install 'dpsynth[client]'"
                         ) from None
    return confluent_kafka


def retention_ms(bootstrap: str, topic: str, *, timeout_s: float = 15.0) -> int | None:
    """The topic's ``retention.ms`` (-1: kept forever), or None when it cannot be read."""
    kafka = kafka_module()
    admin = kafka.admin.AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = kafka.admin.ConfigResource(kafka.admin.ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
        return int(entries["retention.ms"].value)
    except (kafka.KafkaException, KeyError, TypeError, ValueError):
        return None


def topic_partitions(bootstrap: str, topic: str, *, timeout_s: float = 15.0) -> int | None:
    """The partition count of ``topic``, or None when it does not exist."""
    kafka = kafka_module()
    admin = kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except kafka.KafkaException as e:
        raise TopicError(f"cannot reach the broker at {bootstrap} within {timeout_s:g} s "
                         f"({e}); start one or fix the bootstrap address") from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return None
    return len(found.partitions)


def ensure_topic(bootstrap: str, topic: str, partitions: int, *, replication_factor: int = -1,
                 create: bool = True, topic_config: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0) -> int:
    """Make sure ``topic`` has at least ``partitions`` partitions; return its count.

    A missing topic is created with exactly ``partitions`` and ``topic_config`` (unless
    ``create`` is False); an existing one with fewer is refused, never altered.
    """
    kafka = kafka_module()
    count = topic_partitions(bootstrap, topic)
    if count is None:
        if not create:
            raise TopicError(f"topic {topic!r} does not exist on {bootstrap}: create it with "
                             f"at least {partitions} partitions, or allow its creation")
        admin = kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        future = admin.create_topics([kafka.admin.NewTopic(
            topic, num_partitions=partitions, replication_factor=replication_factor,
            config=dict(topic_config or {}))])[topic]
        try:
            future.result(timeout=timeout_s)
        except kafka.KafkaException as e:
            if e.args[0].code() != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicError(f"cannot create topic {topic!r}: {e}") from None
        deadline = time.monotonic() + timeout_s
        while (count := topic_partitions(bootstrap, topic)) is None:
            if time.monotonic() > deadline:
                raise TopicError(f"topic {topic!r} was created but shows no metadata after "
                                 f"{timeout_s:g} s")
            time.sleep(0.1)
    if count < partitions:
        raise TopicError(
            f"topic {topic!r} has {count} partitions; the recording needs {partitions} (its "
            "records keep their partition numbers): import into a new topic (--topic NAME) "
            f"or add partitions (kafka-topics --alter --partitions {partitions})")
    return count
