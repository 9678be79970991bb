"""Key discipline at start: one run id, one noise key; one key, one input (docs/privacy.md P13).

Layer: adapter (confluent-kafka). Noise is derived from the key (P2), so two keys give two
independently noised releases of the same counts; under one run id they would also share
(run, partition, sequence) numbers, and consumers could not tell them apart. Before the worker
publishes anything it reads the tail of the output topic (the last ``DPSYNTH_KEY_CHECK_RECORDS``
records of every partition) and refuses to start if a release header of its run id carries
another key fingerprint. Only fingerprints are compared and shown; the key never is.

The key is also bound to its input (:func:`check_run_input`, :mod:`dpsynth.keybinding`): the
first start records the input topic — its name, its topic id and the first offset of every
partition — under the key's fingerprint in ``DPSYNTH_STATE_DIR``; a later start with that key
over another topic, over the same name created anew (another id), or over a partition whose
first offset now lies *before* the recorded one (records the run never started from) is refused.
A partition's first offset moving forward (retention) is the same input; partitions added to
the topic are recorded as they appear.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgpack
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from dpsynth.errors import ConfigError
from dpsynth.keybinding import locked_record, new_record, refusal, write_record
from dpsynth.keys import NoiseKey
from dpsynth.stream.sink import watermarks


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
            low, high = watermarks(consumer, TopicPartition(topic, p), timeout_s)
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


def input_topic(bootstrap_servers: str, topic: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The input as a run starts on it: the topic's name, id and each partition's first offset."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    described = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
    info = described[topic].result(timeout=timeout_s)
    topic_id = info.topic_id
    consumer = Consumer({"bootstrap.servers": bootstrap_servers,
                         "group.id": "dpsynth-input-check-never-committed",
                         "enable.auto.commit": False})
    try:
        starts = {str(p.id): watermarks(consumer, TopicPartition(topic, p.id), timeout_s)[0]
                  for p in info.partitions}
    finally:
        consumer.close()
    mask = (1 << 64) - 1
    return {"topic": topic, "start_offsets": starts,
            "topic_id": None if topic_id is None else
            f"{topic_id.get_most_significant_bits() & mask:016x}"
            f"{topic_id.get_least_significant_bits() & mask:016x}"}


def input_change(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """How ``current`` is another input than the ``recorded`` one, or None (the same run's).

    >>> run = {"topic": "raw", "topic_id": "a1", "start_offsets": {"0": 5}}
    >>> input_change(run, {**run, "start_offsets": {"0": 9, "1": 0}}) is None  # retention, growth
    True
    >>> input_change(run, {**run, "topic_id": "b2"})
    "the input topic 'raw' created anew (topic id b2, the run's was a1)"
    >>> input_change(run, {**run, "start_offsets": {"0": 0}})
    "input partition 0 starting at offset 0, before the run's first offset 5"
    """
    if recorded.get("topic") != current["topic"]:
        return f"another input topic ({recorded.get('topic')!r}; now {current['topic']!r})"
    if recorded.get("topic_id") and current.get("topic_id") and (
            recorded["topic_id"] != current["topic_id"]):
        return (f"the input topic {current['topic']!r} created anew (topic id "
                f"{current['topic_id']}, the run's was {recorded['topic_id']})")
    for partition, start in sorted(recorded.get("start_offsets", {}).items()):
        now = current["start_offsets"].get(partition)
        if now is None:
            return f"the input topic without its partition {partition}"
        if now < start:
            return (f"input partition {partition} starting at offset {now}, before the run's "
                    f"first offset {start}")
    return None


def check_run_input(key: NoiseKey, run_id: str, current: Mapping[str, Any],
                    state_dir: Path | None = None) -> Path:
    """Bind ``key`` to the input topic at its first start; refuse another input afterwards.

    ``current``: :func:`input_topic`. Raises ConfigError naming the fix (a new key), or
    OSError where the state directory cannot be written.
    """
    with locked_record(key, state_dir) as (path, record):
        if record is None:
            write_record(path, new_record(key, f"dpsynth worker run {run_id} over topic "
                                          f"{current['topic']!r}", topic_input=dict(current)))
            return path
        recorded = record.get("topic_input")
        if recorded is None:  # privacy: P13 (the key ran over a file)
            raise ConfigError(refusal(key, record, path, "another input"))
        change = input_change(recorded, current)
        if change is not None:  # privacy: P13 (one key, one input)
            raise ConfigError(refusal(key, record, path, change))
        grown = {**current["start_offsets"], **recorded.get("start_offsets", {})}
        if grown != recorded.get("start_offsets"):  # new partitions: recorded as they appear
            write_record(path, {**record, "topic_input": {**recorded, "start_offsets": grown}})
    return path
