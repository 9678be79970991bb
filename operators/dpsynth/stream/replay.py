"""Replay of an input partition: a range of offsets read back with a group-less consumer.

Layer: adapter (confluent-kafka). Manual assignment, nothing committed: how a worker rebuilds
the state of a partition it received without local state (``docs/operator.md`` "Replay instead
of changelogs").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from dpsynth.errors import DpsynthError
from dpsynth.stream.processor import InputMessage, Replay
from dpsynth.stream.sink import watermarks

log = logging.getLogger(__name__)


class InputLostError(DpsynthError):
    """Input records needed to rebuild a partition's state were deleted from Kafka."""


def make_replay(bootstrap_servers: str, topic: str, *, timeout_s: float = 30.0) -> Replay:
    """A :data:`~dpsynth.stream.processor.Replay` reading ``topic`` with a group-less consumer.

    Records are read ``read_committed``, exactly as the worker's input consumer reads them
    (:mod:`dpsynth.stream.intake`), so a replay sees the same records: never one of an aborted
    transaction.
    """

    def replay(partition: int, start: int, end: int) -> Iterator[InputMessage]:
        consumer = Consumer({
            "bootstrap.servers": bootstrap_servers,
            "group.id": "dpsynth-replay-never-committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,  # at the end, answer at once (EOF), not after 500 ms
        })
        try:
            tp = TopicPartition(topic, partition)
            low, high = watermarks(consumer, tp, timeout_s)
            if start < low:
                raise InputLostError(
                    f"input {topic}[{partition}]: offsets [{start}, {low}) were deleted "
                    "(retention) before this worker counted them, so the partition's state "
                    "cannot be rebuilt. Restore the worker's DPSYNTH_DATA_DIR from a backup, or "
                    "start a new run (new DPSYNTH_RUN_ID and noise key); raise the input "
                    "topic's retention so it does not happen again"
                )
            end = min(end, high)
            if start >= end:
                return
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + timeout_s
            while True:
                messages = consumer.consume(5000, timeout=1.0)
                if not messages and time.monotonic() > deadline:
                    raise InputLostError(
                        f"input {topic}[{partition}]: replay of [{start}, {end}) stalled for "
                        f"{timeout_s:g} s; check the broker"
                    )
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return
                        raise KafkaException(err)
                    offset = m.offset()
                    assert offset is not None  # a message without error has its offset
                    if offset >= end:
                        return
                    deadline = time.monotonic() + timeout_s
                    kind, ts = m.timestamp()
                    yield InputMessage(
                        offset=offset, value=m.value(),
                        timestamp_ms=ts if kind else None, received=time.monotonic(),
                        key=m.key(),
                    )
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return
        finally:
            consumer.close()

    return replay
