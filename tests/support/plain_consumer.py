"""The synthetic topic as any team reads it: a plain confluent-kafka consumer, no dpsynth code.

Our own tests' kit (not shipped). Nothing here imports dpsynth: this is what a Java, Go or
Kafka Connect consumer sees — every record of the topic, ``read_committed`` (or, to show what
the transactions hide, ``read_uncommitted``), partition by partition in offset order — and the
check of what the worker promises such a consumer (docs/operator.md "Delivery guarantees"):
every release exactly once, complete, its records contiguous and in order, releases of one
input partition in increasing sequence — on one topic partition, so in arrival order too
(:func:`read_arrival_order`, :func:`assert_arrival_order`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import NamedTuple

import msgpack
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
    return sorted(read_arrival_order(bootstrap, topic, isolation=isolation, timeout_s=timeout_s),
                  key=lambda r: (r.partition, r.offset))


def read_arrival_order(bootstrap: str, topic: str, *, isolation: str = "read_committed",
                       timeout_s: float = 60.0) -> list[Record]:
    """Every record of ``topic`` up to each partition's end, in the order one consumer of all
    its partitions received them (librdkafka interleaves the partitions as it fetches)."""
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
        return out
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


def arrival_sequences(records: list[Record]) -> dict[tuple[str, int], list[int]]:
    """(run_id, input partition) → the release sequences in the order of ``records`` (as
    :func:`read_arrival_order` returns them), each release once: at its header record. The
    identity is read from each record's value (msgpack), never from the key."""
    out: dict[tuple[str, int], list[int]] = {}
    for r in records:
        if r.value is None:
            continue
        record = msgpack.unpackb(r.value, raw=False, strict_map_key=False)
        if record.get("kind") == "header":
            out.setdefault((record["run_id"], int(record["partition"])), []).append(
                int(record["sequence"]))
    return out


def assert_arrival_order(records: list[Record], releases: Mapping[tuple[str, int], int]) -> None:
    """What a plain consumer reading from the start may assume: for each (run, input
    partition), the releases it receives, in arrival order, are exactly 1 … n (``releases``
    maps it to n), strictly increasing — never a lower sequence after a higher one."""
    seen = arrival_sequences(records)
    late = {slot: sum(s < max(sequences[:i], default=0) for i, s in enumerate(sequences))
            for slot, sequences in seen.items()}  # releases after a higher sequence
    assert not any(late.values()), (
        f"releases received after one of a higher sequence, per (run, input partition): "
        f"{late} of {({slot: len(s) for slot, s in seen.items()})}")
    assert seen == {slot: list(range(1, n + 1)) for slot, n in releases.items()}, (
        "gaps or duplicates")
