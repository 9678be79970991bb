"""The topics the worker derives from its own: the latest view and the state topic (compacted).

Layer: adapter (confluent-kafka's AdminClient, imported lazily). ``dpsynth topics create``
creates them with the worker's other topics; a worker that finds one missing creates it at
start, as Kafka Streams creates its internal topics (a principal without the right to create
topics gets an error naming ``dpsynth topics create``).

**The latest view** (``docs/operator.md`` "The latest view"): ``cleanup.policy=compact`` and no
time or size retention, so the newest value of every key stays for ever and nothing else does.
A release's records each have their own key (:func:`~dpsynth.stream.output.latest_key`), so
compaction keeps one whole release per (run, input partition). How much older data a late
subscriber may still read before the cleaner removes it is bounded by the active segment
(``segment.ms``: a segment is compacted once it is closed, closed at the first write after
that age) and the cleaner's start (``min.cleanable.dirty.ratio`` low, ``min.compaction.lag.ms``
0). Tombstones (a release shorter than the one before) stay ``delete.retention.ms`` so that a
reader in the middle of the topic sees them.

**The state topic** (:mod:`dpsynth.stream.changelog`): the same compaction settings, one
partition per input partition (co-partitioned), ``max.message.bytes`` fitting a state record
(:data:`~dpsynth.stream.changelog.PART_BYTES`). It holds raw data (the open step's records at the
tree's resolution, exact counts): protect it like the raw-events topic.
"""

from __future__ import annotations

from typing import Any

#: Topic configuration of the latest view (see the module docstring).
LATEST_VIEW_CONFIG: dict[str, str] = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.ms": str(60_000),
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": str(3_600_000),
}


def latest_view_config(replication: int, max_message_bytes: int) -> dict[str, str]:
    """The latest view's configuration for a replication factor and record size limit."""
    return {**LATEST_VIEW_CONFIG, "min.insync.replicas": str(max(replication - 1, 1)),
            "max.message.bytes": str(max_message_bytes)}


def state_topic_config(replication: int) -> dict[str, str]:
    """The state topic's configuration for a replication factor."""
    return latest_view_config(replication, 1_048_588)


def ensure_compacted(bootstrap: str, topic: str, partitions: int, *, max_message_bytes: int,
                     role: str = "latest view", variable: str = "DPSYNTH_LATEST_VIEW",
                     timeout_s: float = 30.0) -> int:
    """The partition count of a derived compacted topic, creating it when it is missing (one
    partition per input partition, replication min(3, brokers), min ISR one less)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from dpsynth.errors import ConfigError

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=timeout_s)
    info = metadata.topics.get(topic)
    if info is not None and info.error is None and info.partitions:
        return len(info.partitions)
    replication = min(3, len(metadata.brokers))
    future = admin.create_topics([NewTopic(
        topic, num_partitions=partitions, replication_factor=replication,
        config=latest_view_config(replication, max_message_bytes))])[topic]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as e:
        error: Any = e.args[0] if e.args else None
        if error is None or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ConfigError(
                f"the {role}'s topic {topic!r} is missing and cannot be created ({e}): "
                f"create it with `dpsynth topics create`, or set {variable}=false"
            ) from None
    return partitions
