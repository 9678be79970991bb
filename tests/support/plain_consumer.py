"""The synthetic topic as any team reads it: a plain confluent-kafka consumer, no dpsynth code.

Our own tests' kit (not shipped). Nothing here imports dpsynth: this is what a Java, Go or
Kafka Connect consumer sees — every record of the topic, ``read_committed`` (or, to show what
the transactions hide, ``read_uncommitted``), partition by partition in offset order — and the
check of what the worker promises such a consumer (docs/operator.md "Delivery guarantees"):
every release exactly once, complete, its records contiguous and in order, releases of one
input partition in increasing sequence.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


class Record(NamedTuple):
    """One record as read: where it sits, its key and value."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_all(bootstrap: str, topic: str, *, isolation: str = "read_committed",
             timeout_s: float = 60.0) -> list[Record]:
    """Every record of ``topic`` up to each partition's end (the last stable offset under
    ``read_committed``), partitions in order, each in offset order."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"plain-reader-{uuid.uuid4().hex[:10]}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
    })
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # from the start
        reading, out = set(partitions), []
        deadline = time.monotonic() + timeout_s
        while reading:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(reading)} of {topic} not read to their "
                                   f"end in {timeout_s:g} s (an open transaction?)")
            for m in consumer.consume(1000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        reading.discard(m.partition())
                        continue
                    raise KafkaException(err)
                out.append(Record(m.partition(), m.offset(), m.key(), m.value()))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def assert_exactly_once(records: list[Record],
                        expected: Mapping[tuple[int, int], list[bytes]], run_id: str) -> int:
    """Assert that ``records`` (one topic, as :func:`read_all` returns them) hold every
    expected release exactly once: its records, byte for byte, contiguous and in order, under
    the key ``run_id/partition/sequence``; nothing else; and, per topic partition, the releases
    of each input partition in increasing sequence. ``expected`` maps (input partition,
    sequence) to the release's records. Returns the number of releases."""
    blocks: list[tuple[int, bytes | None, list[bytes | None]]] = []
    for r in records:  # runs of consecutive records with one key, per topic partition
        if blocks and blocks[-1][0] == r.partition and blocks[-1][1] == r.key:
            blocks[-1][2].append(r.value)
        else:
            blocks.append((r.partition, r.key, [r.value]))
    seen: set[tuple[int, int]] = set()
    last: dict[tuple[int, int], int] = {}  # (topic partition, input partition) → sequence
    for where, key, values in blocks:
        assert key is not None, f"a record without a key in partition {where}"
        run, partition, sequence = key.decode().rsplit("/", 2)
        slot = (int(partition), int(sequence))
        assert run == run_id, f"a record of another run ({run!r})"
        assert slot not in seen, f"release {slot} appears twice (a duplicate, or split)"
        assert slot in expected, f"release {slot} was not expected"
        assert values == expected[slot], (
            f"release {slot}: {len(values)} records differ from the expected "
            f"{len(expected[slot])} (incomplete, reordered or differently noised)")
        order = (where, slot[0])
        assert last.get(order, -1) < slot[1], f"release {slot} after a later one"
        last[order] = slot[1]
        seen.add(slot)
    missing = sorted(set(expected) - seen)
    assert not missing, f"releases missing (a gap): {missing[:5]} of {len(missing)}"
    return len(seen)
