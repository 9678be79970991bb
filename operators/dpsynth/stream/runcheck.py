"""Key discipline at start: one run id, one noise key (docs/privacy.md P13).

Layer: adapter (confluent-kafka). Noise is derived from the key (P2), so two keys give two
independently noised releases of the same counts; under one run id they would also share
(run, partition, sequence) numbers, and consumers could not tell them apart. Before the worker
publishes anything it reads the tail of the output topic (the last ``DPSYNTH_KEY_CHECK_RECORDS``
records of every partition) and refuses to start if a release header of its run id carries
another key fingerprint. Only fingerprints are compared and shown; the key never is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import msgpack
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from dpsynth.errors import ConfigError


def foreign_fingerprint(values: Iterable[tuple[bytes | None, bytes | None]], run_id: str,
                        fingerprint: str) -> str | None:
    """The first other key fingerprint among the release headers of ``run_id``, else None.

    ``values`` are (record key, record value) pairs of the output topic; records of other runs
    and chunk/end records are ignored.

    >>> head = msgpack.packb({"kind": "header", "metadata": {"key_fingerprint": "ab12"}})
    >>> foreign_fingerprint([(b"run-a/0/1", head)], "run-a", "ab12") is None
    True
    >>> foreign_fingerprint([(b"run-a/0/1", head)], "run-a", "ffff")
    'ab12'
    """
    prefix = f"{run_id}/".encode()
    for key, value in values:
        if not key or not key.startswith(prefix) or not value:
            continue
        try:
            record = msgpack.unpackb(value, raw=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue
        if not isinstance(record, dict) or record.get("kind") != "header":
            continue
        metadata = record.get("metadata")
        seen = metadata.get("key_fingerprint") if isinstance(metadata, dict) else None
        if isinstance(seen, str) and seen != fingerprint:
            return seen
    return None


def _tail(bootstrap_servers: str, topic: str, records: int,
          timeout_s: float) -> Iterable[tuple[bytes | None, bytes | None]]:
    """(key, value) of the last ``records`` records of every partition of ``topic``."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": "dpsynth-key-check-never-committed",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_uncommitted", "auto.offset.reset": "earliest",
    })
    try:
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends, assign = {}, []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                       timeout=timeout_s)
            if high > low:
                ends[p] = high
                assign.append(TopicPartition(topic, p, max(low, high - records)))
        if not assign:
            return
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for m in consumer.consume(5000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                    ends.pop(m.partition(), None)
                    continue
                yield m.key(), m.value()
                offset = m.offset()
                assert offset is not None  # a message without error has its offset
                if offset + 1 >= ends.get(m.partition(), 0):
                    ends.pop(m.partition(), None)
        if ends:
            raise ConfigError(f"DPSYNTH_OUTPUT_TOPIC ({topic!r}): its tail could not be read "
                              f"within {timeout_s:g} s for the key check; check the broker")
    finally:
        consumer.close()


def check_run_key(bootstrap_servers: str, topic: str, run_id: str, fingerprint: str, *,
                  records: int, timeout_s: float = 30.0) -> None:
    """Refuse (ConfigError naming the fix) a run id already published under another key."""
    if records <= 0:
        return
    other = foreign_fingerprint(_tail(bootstrap_servers, topic, records, timeout_s), run_id,
                                fingerprint)
    if other is not None:  # privacy: P13
        raise ConfigError(
            f"DPSYNTH_RUN_ID ({run_id!r}): the output topic {topic!r} holds releases of this run "
            f"made with another noise key (fingerprint {other}; this worker's is {fingerprint}). "
            "Publishing would put differently-noised releases under the same (run, partition, "
            "sequence). Use that run's key (and its data directory), or start a new run: a new "
            "DPSYNTH_RUN_ID — or unset it, the default run-<key fingerprint> differs per key — "
            "with an empty DPSYNTH_DATA_DIR; a new run over input already counted spends its "
            "ε again (docs/privacy.md P13)")
